package core

import (
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/vyre-go/vyrecuda/core/kernels"
)

// The built-in programs wrap the kernels of package core/kernels. Each
// derives its grid and its element count n from a bound buffer's length
// (n = Len/4, 32-bit elements), passes n to the kernel as a u32, and refuses
// a dispatch whose other buffers hold fewer than n elements. A dispatch
// passes their buffers in Bufs and their scalars in DispatchConfig.Scalars,
// or all of them, typed, in DispatchConfig.Args (Program.Params lists the
// types): the two forms launch the same kernel.

// ProgramFillU32 returns the built-in program that sets every 32-bit element
// of its one buffer to a value: buffers (dst), scalars (value); or Args
// (ArgBuffer(dst), ArgUint32(value)).
func ProgramFillU32() *Program { return builtins().fill }

// ProgramCopyU32 returns the built-in program that copies 32-bit elements:
// buffers (src, dst), or Args (ArgBuffer(src), ArgBuffer(dst)); n comes from
// dst.
func ProgramCopyU32() *Program { return builtins().copy }

// ProgramVAddU32 returns the built-in program out[i] = a[i] + b[i] (uint32,
// wrapping): buffers (a, b, out), or Args of the three buffers; n comes
// from out.
func ProgramVAddU32() *Program { return builtins().vadd }

// ProgramScaleF32 returns the built-in program out[i] = x[i] * factor
// (float32, round to nearest): buffers (x, out), scalars (math.Float32bits
// of factor); or Args (ArgBuffer(x), ArgBuffer(out), ArgFloat32(factor)); n
// comes from out.
func ProgramScaleF32() *Program { return builtins().scale }

type builtinSet struct{ fill, copy, vadd, scale *Program }

var builtins = sync.OnceValue(func() builtinSet {
	// Each built-in carries its sm_90 image as the variant that Backends
	// using programmatic dependent launch load (pdl.go).
	mk := func(name string, image, sm90 []byte, entry string, types []ParamType, from int, host HostKernel) *Program {
		nbufs := 0
		for _, t := range types {
			if t == ParamBuffer {
				nbufs++
			}
		}
		spec := ProgramSpec{Name: name, Image: image, Entry: entry, Buffers: nbufs,
			Grid: GridRule{FromBuffer: from, ElemSize: 4}, Count: true, Scalars: len(types) - nbufs, Host: host}
		p, err := NewProgram(spec)
		if err == nil {
			spec.Image, spec.WaitsOnGridDependencies = sm90, true
			p.sm90, err = NewProgram(spec)
		}
		if err != nil {
			// The specs are constants of this file; a failure is a bug here.
			panic(err)
		}
		p.argTypes = types
		return p
	}
	t := builtinArgTypes
	return builtinSet{
		fill:  mk("fill_u32", kernels.FillPTX, kernels.FillPTXSM90, kernels.FillEntry, t.fill, 0, fillTwin),
		copy:  mk("copy_u32", kernels.CopyPTX, kernels.CopyPTXSM90, kernels.CopyEntry, t.copy, 1, copyTwin),
		vadd:  mk("vadd_u32", kernels.VAddPTX, kernels.VAddPTXSM90, kernels.VAddEntry, t.vadd, 2, vaddTwin),
		scale: mk("scale_f32", kernels.ScalePTX, kernels.ScalePTXSM90, kernels.ScaleEntry, t.scale, 1, scaleTwin),
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

// builtinArgTypes are the typed forms of the built-ins' buffers and scalars,
// in the order of their specs: the element count is not among them.
var builtinArgTypes = struct{ fill, copy, vadd, scale []ParamType }{
	fill:  []ParamType{ParamBuffer, ParamUint32},
	copy:  []ParamType{ParamBuffer, ParamBuffer},
	vadd:  []ParamType{ParamBuffer, ParamBuffer, ParamBuffer},
	scale: []ParamType{ParamBuffer, ParamBuffer, ParamFloat32},
}

// untypeStep rewrites step i, which passes Args to a Program that takes
// buffers and u32 scalars (a built-in), into the Bufs and Scalars form it
// launches with, in a copy of the batch's steps: the caller's batch is
// left as it was. The Args must match the program's Params exactly, with
// whole buffers.
func (pl *batchPlan) untypeStep(op string, i int) error {
	s := pl.batch.Steps[i]
	p, cfg := s.Program, s.Config
	bad := func(detail, fix string) error {
		return newError(op, KindInvalidArgument, stepPrefix(i)+fmt.Sprintf("program %q ", p.spec.Name)+detail, fix)
	}
	switch {
	case len(s.Bufs) != 0 || len(cfg.Scalars) != 0:
		return bad(fmt.Sprintf("got %d Args and also %d Bufs and %d u32 Scalars", len(cfg.Args), len(s.Bufs), len(cfg.Scalars)),
			"pass either Bufs and DispatchConfig.Scalars, or every argument in DispatchConfig.Args")
	case len(cfg.Args) != len(p.argTypes):
		return bad(fmt.Sprintf("takes %d arguments %v but got %d", len(p.argTypes), p.argTypes, len(cfg.Args)),
			"pass exactly one Arg per parameter, in order")
	}
	var bufs []Buffer
	var scalars []uint32
	for k, a := range cfg.Args {
		if want := p.argTypes[k]; a.typ != want {
			return bad(fmt.Sprintf("argument %d is %v; the parameter is %v", k, a.typ, want),
				fmt.Sprintf("pass argument %d with the constructor of its type (Arg%s)", k, argCtor(want)))
		}
		if a.typ != ParamBuffer {
			scalars = append(scalars, uint32(a.bits)) // a 4-byte scalar's bits
			continue
		}
		if a.off != 0 {
			return bad(fmt.Sprintf("argument %d: a built-in program takes whole buffers, not one at offset %d", k, a.off),
				"pass the buffer with ArgBuffer")
		}
		bufs = append(bufs, a.buf)
	}
	if !pl.ownSteps {
		pl.batch.Steps, pl.ownSteps = slices.Clone(pl.batch.Steps), true
	}
	s.Bufs, s.Config.Scalars, s.Config.Args = bufs, scalars, nil
	pl.batch.Steps[i] = s
	return nil
}
