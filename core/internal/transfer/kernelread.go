package transfer

import (
	"math"
	"unsafe"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/xferplan"
)

// A read into page-locked memory from HostAlloc that follows the batch's
// kernels can be written by a copy kernel (vyre_copy_u32, from the device
// range to the memory's host address, which kernels can use where the
// device maps pinned host memory) instead of a DMA: a direct read into
// AllocHostPinned memory, or a per-copy read into the batch's staging
// (which HostAlloc gave too). The DMA engine has to wait for the kernels
// before it, and on an H200 host that wait cost the raw driver's step of
// upload, kernel and read about 6 or 12 us in some steps and nothing in
// others, in shares that changed from process to process (128 KiB each
// way: 16-18, 24-26 or 30-32 us); the same step with the read written by a
// kernel ran in one mode, 17.5-20.4 us. The kernel loses below 64 KiB (16
// KiB: 14.7-18.7 us against 14.3-16.1). At 512 KiB it lost in one raw
// driver step (36.5-36.8 us against 34.9-35.1) and gained in another
// (32.8 against 38.9), and gained in W8's Run from Go slices (72-77 us
// against 80-84) and replay (37-39 against 38-40); at 2 MiB the raw step
// took 96.4-98.0 us against 100.3-101.3, and W8's pinned Run and replay
// stayed out of the DMA's slow mode (docs/perf-log-inference.md).

// Default bounds of a read written by a copy kernel (Tuning.KernelReadMin,
// KernelReadMax).
const (
	defaultKernelReadMin = 64 << 10
	defaultKernelReadMax = 2 << 20
)

// copyOutBlock is the threads per block of the copy kernel; copyOutGrid
// its most blocks (it strides over the words).
const (
	copyOutBlock = 256
	copyOutGrid  = 1024
)

// kernelRead reports whether a read of n bytes from src into HostAlloc
// memory at host address dst, queued after tb's kernels, is written by the
// copy kernel: the device maps pinned host memory, n lies within t's
// bounds, and n and both addresses are whole 32-bit words.
func (e *Engine[E]) kernelRead(t *Tuning, tb *Batch, src, dst uint64, n int) bool {
	if !e.mapsTables || !tb.AfterSteps || t.KernelReadMax < 0 || n < t.KernelReadMin || n > t.KernelReadMax ||
		uint64(n/4) > math.MaxUint32 { // the kernel counts words in 32 bits
		return false
	}
	return (src|dst|uint64(n))&3 == 0
}

// directKernelRead reports whether c, a direct read of tb, is written by
// the copy kernel: it lands in HostAlloc memory and qualifies (kernelRead).
func (e *Engine[E]) directKernelRead(t *Tuning, tb *Batch, c DirectRead) bool {
	return c.Mapped && e.kernelRead(t, tb, c.Src, hostAddr(c.Out), len(c.Out))
}

// anyKernelRead reports whether a read of tb may be written by the copy
// kernel: a direct one, or, when x reads per copy, a fused read whose
// staging (not taken yet: its offset in the block, which starts on a
// page) qualifies.
func (e *Engine[E]) anyKernelRead(x *batchXfer, tb *Batch) bool {
	for _, c := range tb.DirectRds {
		if e.directKernelRead(&x.t, tb, c) {
			return true
		}
	}
	if tb.NonEmptyReads == 0 || x.rd.Kind != xferplan.PerCopy {
		return false
	}
	for i, c := range tb.FusedRds.Copies {
		if e.kernelRead(&x.t, tb, c.Src, uint64(tb.Rd.offs[i]), c.Len) {
			return true
		}
	}
	return false
}

// queueKernelRead queues the copy kernel f writing the bytes at src to
// out, a HostAlloc range, on s.
func (e *Engine[E]) queueKernelRead(f driver.Function, s driver.Stream, src uint64, out []byte) error {
	words := len(out) / 4
	blocks := min((words+copyOutBlock-1)/copyOutBlock, copyOutGrid)
	lc := driver.LaunchConfig{Grid: [3]uint32{uint32(blocks), 1, 1}, Block: [3]uint32{copyOutBlock, 1, 1}}
	args := []driver.KernelArg{{Ptr: src, IsPtr: true}, {Ptr: hostAddr(out), IsPtr: true}, {U32: uint32(words)}}
	return e.drv.Launch(f, lc, s, args)
}

// hostAddr is the address of b's first byte.
func hostAddr(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }
