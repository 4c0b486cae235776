package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/vyre-go/vyrecuda/core"
)

// W8, the inference step: upload n bytes of float32, run one elementwise
// kernel compiled by Backend.Compile (y = x*w8Scale + w8Shift), read n bytes
// back. Each size runs in five forms, each a row (w8Forms). Every step
// changes a few words of the input, and after the measured steps each form's
// last output is compared bit for bit with the CPU's, so a form that skipped
// an upload, a launch or a read fails the bench instead of timing nothing.

// The kernel's scalars. Inputs are multiples of 0.25 below 1024, so x*3+0.5
// is exact in float32 whether or not the device fuses the multiply and add,
// and the check can compare bits.
const (
	w8Scale = float32(3)
	w8Shift = float32(0.5)
)

// w8Source is the kernel, a grid-stride loop so a capped grid covers all n.
const w8Source = `
extern "C" __global__ void w8_affine(float *y, const float *x, float a, float b, unsigned int n) {
	for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		y[i] = x[i] * a + b;
}`

// w8Twin is the kernel's Go twin, which runs on the simulated device. It is
// a variable so a test can make it compute garbage and see the bench refuse.
var w8Twin core.HostKernel = func(mem core.KernelMemory, _ core.LaunchConfig, args []core.KernelArg) error {
	n := int(args[4].Uint32())
	if n == 0 {
		return nil
	}
	yb, err := mem.Bytes(args[0].Ptr, 4*n)
	if err != nil {
		return err
	}
	xb, err := mem.Bytes(args[1].Ptr, 4*n)
	if err != nil {
		return err
	}
	// Device memory is little-endian, as the hosts Go runs on with CUDA.
	y := unsafe.Slice((*float32)(unsafe.Pointer(&yb[0])), n)
	x := unsafe.Slice((*float32)(unsafe.Pointer(&xb[0])), n)
	a, b := args[2].Float32(), args[3].Float32()
	for i := range y {
		y[i] = x[i]*a + b
	}
	return nil
}

// compileW8 compiles the kernel for b's device (the Go twin on sim).
func compileW8(b *core.Backend) (*core.Program, error) {
	return b.Compile(core.CompileSpec{
		Name: "w8_affine", Source: w8Source, Entry: "w8_affine",
		Params: []core.ParamType{core.ParamBuffer, core.ParamBuffer, core.ParamFloat32, core.ParamFloat32, core.ParamUint32},
		Grid:   core.GridRule{ElemSize: 4, FromBuffer: 0},
		Host:   w8Twin,
	})
}

// w8Fixture is what every form of one size shares: the device buffers, the
// compiled kernel, Go slices and Backend-pinned memory of n bytes each way,
// and the step counter that varies the input.
type w8Fixture struct {
	b      *core.Backend
	n      int
	prog   *core.Program
	x, y   core.Buffer
	args   []core.Arg
	goIn   []byte
	pinIn  *core.PinnedBuffer
	pinOut *core.PinnedBuffer
	step   uint32
}

// newW8Fixture allocates everything for n bytes each way and fills both
// inputs; on failure it frees what it took.
func newW8Fixture(b *core.Backend, prog *core.Program, n int) (*w8Fixture, error) {
	f := &w8Fixture{b: b, n: n, prog: prog}
	if err := f.alloc(); err != nil {
		return nil, errors.Join(err, f.close())
	}
	f.goIn = make([]byte, n)
	fillW8Input(f.goIn)
	fillW8Input(f.pinIn.Bytes()[:n])
	f.args = []core.Arg{core.ArgBuffer(f.y), core.ArgBuffer(f.x), core.ArgFloat32(w8Scale), core.ArgFloat32(w8Shift), core.ArgUint32(uint32(n / 4))}
	return f, nil
}

// alloc takes the device buffers and the pinned memory, stopping at the
// first failure (close frees what it took).
func (f *w8Fixture) alloc() (err error) {
	if f.x, err = f.b.Alloc(f.n); err != nil {
		return err
	}
	if f.y, err = f.b.Alloc(f.n); err != nil {
		return err
	}
	if f.pinIn, err = f.b.AllocHostPinned(f.n); err != nil {
		return err
	}
	f.pinOut, err = f.b.AllocHostPinned(f.n)
	return err
}

// close frees what the fixture holds; a zero Buffer (never allocated) is
// skipped.
func (f *w8Fixture) close() error {
	var errs []error
	for _, p := range []*core.PinnedBuffer{f.pinIn, f.pinOut} {
		if p != nil {
			errs = append(errs, p.Free())
		}
	}
	for _, h := range []core.Buffer{f.x, f.y} {
		if h != (core.Buffer{}) {
			errs = append(errs, f.b.Free(h))
		}
	}
	return errors.Join(errs...)
}

// batch is the step as one Batch: upload in into x, the kernel, read y.
func (f *w8Fixture) batch(in []byte) core.Batch {
	return core.Batch{
		Uploads: []core.UploadAt{{Buf: f.x, Data: in}},
		Steps:   []core.Step{{Program: f.prog, Config: core.DispatchConfig{Args: f.args}}},
		Reads:   []core.Range{f.y.All()},
	}
}

// fillW8Input writes float32 multiples of 0.25 below 1024 into in.
func fillW8Input(in []byte) {
	for i := 0; i+4 <= len(in); i += 4 {
		binary.LittleEndian.PutUint32(in[i:], math.Float32bits(float32((i/4*7)%4096)*0.25))
	}
}

// touch changes the first, middle and last float of in to values that
// follow the fixture's step counter, so every step uploads new bytes and a
// result of an earlier step shows in the check.
func (f *w8Fixture) touch(in []byte) {
	f.step++
	words := len(in) / 4
	for k, w := range []int{0, words / 2, words - 1} {
		v := float32((f.step*3+uint32(k))%4096) * 0.25
		binary.LittleEndian.PutUint32(in[4*w:], math.Float32bits(v))
	}
}

// verifyW8 checks that out is in transformed by the kernel, bit for bit.
func verifyW8(what string, in, out []byte) error {
	want := make([]uint32, len(in)/4)
	for i := range want {
		x := math.Float32frombits(binary.LittleEndian.Uint32(in[4*i:]))
		want[i] = math.Float32bits(x*w8Scale + w8Shift)
	}
	if err := verifyWords(what, out, want); err != nil {
		return fmt.Errorf("%w: the output is not x*%g+%g of the input", err, w8Scale, w8Shift)
	}
	return nil
}
