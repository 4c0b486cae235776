package cudaapi_test

import (
	"errors"
	"fmt"

	"github.com/vyre-go/vyrecuda/cudaapi"
)

// Example shows the calling pattern the real-driver adapter follows: load,
// make a context current, allocate, launch with C-held parameters, and tell
// driver statuses from a missing driver.
func Example() {
	if err := cudaapi.Loaded(); err != nil {
		fmt.Println("no driver:", errors.Is(err, cudaapi.ErrDriverNotFound))
		return
	}
	if err := cudaapi.Init(0); err != nil {
		return
	}
	dev, _ := cudaapi.DeviceGet(0)
	ctx, err := cudaapi.DevicePrimaryCtxRetain(dev)
	if err != nil {
		return
	}
	defer cudaapi.DevicePrimaryCtxRelease(dev)
	// The caller keeps this goroutine on one OS thread (runtime.LockOSThread)
	// while the context is current.
	_ = cudaapi.CtxSetCurrent(ctx)

	buf, err := cudaapi.MemAlloc(4 << 20)
	var r cudaapi.Result
	if errors.As(err, &r) && r == cudaapi.CUDA_ERROR_OUT_OF_MEMORY {
		return
	}
	defer cudaapi.MemFree(buf)

	var f cudaapi.Function // from ModuleLoadImage + ModuleGetFunction
	params, err := cudaapi.NewKernelParams(2)
	if err != nil {
		return
	}
	defer params.Free()
	_ = params.SetDevicePtr(0, buf)
	_ = params.SetUint32(1, 1<<20)
	_ = cudaapi.LaunchKernel(f, 4096, 1, 1, 256, 1, 1, 0, 0, params.Pointer(), nil)
}
