package sim_test

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// Example drives the simulated device directly: work queued on a stream runs
// only when the stream is synchronized, and faults are injected by operation.
func Example() {
	dev := sim.New(sim.Config{TotalMemory: 1 << 20})
	ptr, _ := dev.MemAlloc(4)
	stage, _ := dev.HostAlloc(4) // async copies need pinned memory
	s, _ := dev.StreamCreate()

	copy(stage, "gpu!")
	_ = dev.MemcpyHtoDAsync(ptr, stage, s)
	before, _ := dev.ReadDevice(ptr, 4) // peeks without running the stream
	_ = dev.StreamSynchronize(s)
	after, _ := dev.ReadDevice(ptr, 4)
	fmt.Printf("before sync %q, after %q\n", before, after)

	dev.FailNth(sim.OpMemAlloc, 1, cudaapi.CUDA_ERROR_OUT_OF_MEMORY)
	_, err := dev.MemAlloc(4)
	fmt.Println("injected:", errors.Is(err, cudaapi.CUDA_ERROR_OUT_OF_MEMORY))

	_ = dev.StreamDestroy(s)
	_ = dev.HostFree(unsafe.Pointer(&stage[0]))
	_ = dev.MemFree(ptr)
	fmt.Println("leak-free:", dev.Live().Zero())
	// Output:
	// before sync "\x00\x00\x00\x00", after "gpu!"
	// injected: true
	// leak-free: true
}
