package core

import (
	"fmt"
	"math"
	"sync"

	"github.com/vyre-go/vyrecuda/core/kernels"
)

// The built-in programs wrap the kernels of package core/kernels. Each
// derives its grid and its element count n from a bound buffer's length
// (n = Len/4, 32-bit elements), passes n to the kernel as a u32, and refuses
// a dispatch whose other buffers hold fewer than n elements.

// ProgramFillU32 returns the built-in program that sets every 32-bit element
// of its one buffer to a value: buffers (dst), scalars (value).
func ProgramFillU32() *Program { return builtins().fill }

// ProgramCopyU32 returns the built-in program that copies 32-bit elements:
// buffers (src, dst); n comes from dst.
func ProgramCopyU32() *Program { return builtins().copy }

// ProgramVAddU32 returns the built-in program out[i] = a[i] + b[i] (uint32,
// wrapping): buffers (a, b, out); n comes from out.
func ProgramVAddU32() *Program { return builtins().vadd }

// ProgramScaleF32 returns the built-in program out[i] = x[i] * factor
// (float32, round to nearest): buffers (x, out), scalars (math.Float32bits
// of factor); n comes from out.
func ProgramScaleF32() *Program { return builtins().scale }

type builtinSet struct{ fill, copy, vadd, scale *Program }

var builtins = sync.OnceValue(func() builtinSet {
	// Each built-in carries its sm_90 image as the variant that Backends
	// using programmatic dependent launch load (pdl.go).
	mk := func(name string, image, sm90 []byte, entry string, nbufs, from, scalars int, host HostKernel) *Program {
		spec := ProgramSpec{Name: name, Image: image, Entry: entry, Buffers: nbufs,
			Grid: GridRule{FromBuffer: from, ElemSize: 4}, Count: true, Scalars: scalars, Host: host}
		p, err := NewProgram(spec)
		if err == nil {
			spec.Image, spec.WaitsOnGridDependencies = sm90, true
			p.sm90, err = NewProgram(spec)
		}
		if err != nil {
			// The specs are constants of this file; a failure is a bug here.
			panic(err)
		}
		return p
	}
	return builtinSet{
		fill:  mk("fill_u32", kernels.FillPTX, kernels.FillPTXSM90, kernels.FillEntry, 1, 0, 1, fillTwin),
		copy:  mk("copy_u32", kernels.CopyPTX, kernels.CopyPTXSM90, kernels.CopyEntry, 2, 1, 0, copyTwin),
		vadd:  mk("vadd_u32", kernels.VAddPTX, kernels.VAddPTXSM90, kernels.VAddEntry, 3, 2, 0, vaddTwin),
		scale: mk("scale_f32", kernels.ScalePTX, kernels.ScalePTXSM90, kernels.ScaleEntry, 2, 1, 1, scaleTwin),
	}
})

// twinArgs checks a twin's parameters: ptrs device pointers, then u32s
// scalars, the first of which is the element count n. It returns the n*4
// bytes behind each pointer and the scalars.
func twinArgs(name string, mem KernelMemory, args []KernelArg, ptrs, u32s int) ([][]byte, []uint32, error) {
	if len(args) != ptrs+u32s {
		return nil, nil, fmt.Errorf("%s: %d parameters, want %d", name, len(args), ptrs+u32s)
	}
	scalars := make([]uint32, u32s)
	for i, a := range args {
		if a.IsPtr != (i < ptrs) {
			return nil, nil, fmt.Errorf("%s: parameter %d has the wrong kind", name, i)
		}
		if i >= ptrs {
			scalars[i-ptrs] = a.U32
		}
	}
	n := int(scalars[0])
	if n > math.MaxInt/4 {
		return nil, nil, fmt.Errorf("%s: %d elements overflow", name, n)
	}
	views := make([][]byte, ptrs)
	for i := range views {
		v, err := mem.Bytes(args[i].Ptr, 4*n)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: parameter %d: %w", name, i, err)
		}
		views[i] = v
	}
	return views, scalars, nil
}

func fillTwin(mem KernelMemory, _ LaunchConfig, args []KernelArg) error {
	v, s, err := twinArgs(kernels.FillEntry, mem, args, 1, 2)
	if err != nil {
		return err
	}
	kernels.Fill(v[0], int(s[0]), s[1])
	return nil
}

func copyTwin(mem KernelMemory, _ LaunchConfig, args []KernelArg) error {
	v, s, err := twinArgs(kernels.CopyEntry, mem, args, 2, 1)
	if err != nil {
		return err
	}
	kernels.Copy(v[0], v[1], int(s[0]))
	return nil
}

func vaddTwin(mem KernelMemory, _ LaunchConfig, args []KernelArg) error {
	v, s, err := twinArgs(kernels.VAddEntry, mem, args, 3, 1)
	if err != nil {
		return err
	}
	kernels.VAdd(v[0], v[1], v[2], int(s[0]))
	return nil
}

func scaleTwin(mem KernelMemory, _ LaunchConfig, args []KernelArg) error {
	v, s, err := twinArgs(kernels.ScaleEntry, mem, args, 2, 2)
	if err != nil {
		return err
	}
	kernels.Scale(v[0], v[1], int(s[0]), math.Float32frombits(s[1]))
	return nil
}
