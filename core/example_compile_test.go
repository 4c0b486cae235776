package core_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/nvrtc"
)

// SAXPY written in CUDA C inside a Go string, compiled for the Backend's
// device, run over []float32 and checked. On a GPU (core.OpenCUDA) Compile
// calls NVRTC (once: the result is cached on disk); on the simulated device
// used here, nothing is compiled and the Go twin in Host runs instead.
func ExampleBackend_Compile() {
	b, err := core.Open(sim.New(sim.Config{}))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()

	const src = `
extern "C" __global__ void saxpy(float *y, const float *x, float a, unsigned int n) {
	unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) y[i] = a * x[i] + y[i];
}`
	saxpy, err := b.Compile(core.CompileSpec{
		Source: src,
		Entry:  "saxpy",
		Params: []core.ParamType{core.ParamBuffer, core.ParamBuffer, core.ParamFloat32, core.ParamUint32},
		Grid:   core.GridRule{ElemSize: 4, FromBuffer: 0}, // one thread per float of y
		Host: func(mem core.KernelMemory, _ core.LaunchConfig, args []core.KernelArg) error {
			n := int(args[3].Uint32())
			y, err := core.KernelSlice[float32](mem, args[0], n) // device memory as []float32
			if err != nil {
				return err
			}
			x, err := core.KernelSlice[float32](mem, args[1], n)
			if err != nil {
				return err
			}
			for i := range y {
				y[i] += args[2].Float32() * x[i]
			}
			return nil
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	x := []float32{1, 2, 3, 4}
	y := []float32{10, 20, 30, 40}
	xs, err := core.AllocSlice[float32](b, len(x))
	if err != nil {
		fmt.Println(err)
		return
	}
	ys, err := core.AllocSlice[float32](b, len(y))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := core.UploadSlice(b, xs, x); err != nil {
		fmt.Println(err)
		return
	}
	if err := core.UploadSlice(b, ys, y); err != nil {
		fmt.Println(err)
		return
	}
	err = b.Dispatch(saxpy, nil, core.DispatchConfig{Args: []core.Arg{
		core.ArgBuffer(ys), core.ArgBuffer(xs), core.ArgFloat32(2), core.ArgUint32(uint32(len(y))),
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	got, err := core.DownloadSlice(b, ys, y[:0]) // into y's own storage
	if err != nil {
		fmt.Println(err)
		return
	}
	for i := range got {
		if want := 2*x[i] + float32(10*(i+1)); math.Abs(float64(got[i]-want)) > 1e-6 {
			fmt.Println("mismatch at", i)
		}
	}
	fmt.Println(got)
	// Output: [12 24 36 48]
}

// Compiling with a deadline. The simulated device compiles nothing, but it
// refuses what NVRTC would refuse (here Params that do not match the
// kernel's parameters), with a log in NVRTC's form.
func ExampleBackend_CompileContext() {
	b, err := core.Open(sim.New(sim.Config{}))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	spec := core.CompileSpec{
		Source: `__global__ void fill(int *p, int v) { p[threadIdx.x] = v; }`,
		Entry:  "fill",
		Params: []core.ParamType{core.ParamBuffer, core.ParamInt32},
		Grid:   core.GridRule{Blocks: 1},
		Host: func(mem core.KernelMemory, lc core.LaunchConfig, args []core.KernelArg) error {
			n := int(lc.Block[0]) // one block: p[threadIdx.x] for every thread
			p, err := mem.Bytes(args[0].Ptr, 4*n)
			if err != nil {
				return err
			}
			for i := range n {
				binary.LittleEndian.PutUint32(p[4*i:], uint32(args[1].Int32()))
			}
			return nil
		},
	}
	fill, err := b.CompileContext(ctx, spec) // ErrInFlight wrapping ctx.Err() if ctx ends first
	fmt.Println(fill.Name(), err)

	spec.Params = spec.Params[:1]
	_, err = b.CompileContext(ctx, spec)
	log, _ := nvrtc.IsCompileError(err)
	fmt.Println(strings.SplitN(log, "\n", 2)[0])
	// Output:
	// fill <nil>
	// fill.cu(1): error: kernel "fill" takes 2 parameters, but Params declares 1
}
