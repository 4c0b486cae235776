package transfer

import (
	"math"
	"unsafe"

	"github.com/vyre-go/vyrecuda/core/driver"
)

// A direct read into page-locked memory from HostAlloc that follows the
// batch's kernels can be written by a copy kernel (vyre_copy_u32, from
// the device range to the memory's host address, which kernels can use
// where the device maps pinned host memory) instead of a DMA. The DMA
// engine has to wait for the kernels before it, and on an H200 host that
// wait cost the raw driver's step of upload, kernel and read about 6 or
// 12 us in some steps and nothing in others, in shares that changed from
// process to process (128 KiB each way: 16-18, 24-26 or 30-32 us); the
// same step with the read written by a kernel ran in one mode, 17.5-20.4
// us. The kernel loses below 64 KiB (16 KiB: 14.7-18.7 us against
// 14.3-16.1) and above 256 KiB (512 KiB: 36.5-36.8 against 34.9-35.1).

// Default bounds of a read written by a copy kernel (Tuning.KernelReadMin,
// KernelReadMax).
const (
	defaultKernelReadMin = 64 << 10
	defaultKernelReadMax = 256 << 10
)

// copyOutBlock is the threads per block of the copy kernel; copyOutGrid
// its most blocks (it strides over the words).
const (
	copyOutBlock = 256
	copyOutGrid  = 1024
)

// kernelRead reports whether c, a direct read of tb, is written by the
// copy kernel: the device maps pinned host memory, c lands in HostAlloc
// memory after tb's kernels, its length lies within t's bounds, and its
// length and both addresses are whole 32-bit words.
func (e *Engine[E]) kernelRead(t *Tuning, tb *Batch, c DirectRead) bool {
	n := len(c.Out)
	if !e.mapsTables || !tb.AfterSteps || !c.Mapped || t.KernelReadMax < 0 || n < t.KernelReadMin || n > t.KernelReadMax ||
		uint64(n/4) > math.MaxUint32 { // the kernel counts words in 32 bits
		return false
	}
	return (c.Src|uint64(uintptr(unsafe.Pointer(unsafe.SliceData(c.Out))))|uint64(n))&3 == 0
}

// anyKernelRead reports whether a direct read of tb is written by the
// copy kernel.
func (e *Engine[E]) anyKernelRead(t *Tuning, tb *Batch) bool {
	for _, c := range tb.DirectRds {
		if e.kernelRead(t, tb, c) {
			return true
		}
	}
	return false
}

// queueKernelRead queues the copy kernel f writing c's bytes to c.Out on s.
func (e *Engine[E]) queueKernelRead(f driver.Function, s driver.Stream, c DirectRead) error {
	words := len(c.Out) / 4
	blocks := min((words+copyOutBlock-1)/copyOutBlock, copyOutGrid)
	lc := driver.LaunchConfig{Grid: [3]uint32{uint32(blocks), 1, 1}, Block: [3]uint32{copyOutBlock, 1, 1}}
	args := []driver.KernelArg{{Ptr: c.Src, IsPtr: true},
		{Ptr: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(c.Out)))), IsPtr: true}, {U32: uint32(words)}}
	return e.drv.Launch(f, lc, s, args)
}
