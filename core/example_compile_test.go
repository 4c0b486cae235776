package core_test

import (
	"fmt"
	"math"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
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
