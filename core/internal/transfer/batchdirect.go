package transfer

import (
	"unsafe"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
)

// A batch's uploads from host memory pinned through the Backend, and its
// reads into such memory, skip the staging: each is one DMA straight from
// or into the caller's bytes, queued after the batch's other uploads (the
// caller keeps them apart from every other upload, so the order cannot
// change what lands) and after its other reads. Each holds one pending use
// of its region (Batch.Regions) until the owner of the batch releases it
// (ReleaseBatch), so the memory cannot be freed or unpinned while a DMA may
// still touch it.

// DirectUp is one upload of a batch from caller-pinned memory.
type DirectUp struct {
	Dst  uint64
	Data []byte
}

// DirectRead is one read of a batch into caller-pinned memory.
type DirectRead struct {
	Src uint64
	Out []byte
	// Mapped: Out lies in memory from HostAlloc, which kernels can write
	// at its host address where the device maps pinned host memory.
	Mapped bool
}

// Pinned returns the caller-pinned region holding all of p with one more
// pending use (the caller drops it with Unpin, or hands it to a Batch), or
// nil when p does not lie in such memory.
func (e *Engine[E]) Pinned(p []byte) *hostmem.Region {
	return e.pinned.Use(uintptr(unsafe.Pointer(unsafe.SliceData(p))), len(p))
}

// Unpin drops one pending use of each of regs that is not nil.
func (e *Engine[E]) Unpin(regs ...*hostmem.Region) {
	for _, r := range regs {
		if r != nil {
			e.pinned.Done(r)
		}
	}
}

// directBytes returns the bytes of tb's direct uploads and reads.
func (tb *Batch) directBytes() (up, rd uint64) {
	for _, c := range tb.DirectUps {
		up += uint64(len(c.Data))
	}
	for _, c := range tb.DirectRds {
		rd += uint64(len(c.Out))
	}
	return up, rd
}

// queueDirectUps queues tb's direct uploads on s.
func (e *Engine[E]) queueDirectUps(s driver.Stream, tb *Batch) (string, error) {
	for _, c := range tb.DirectUps {
		if err := e.drv.MemcpyHtoDAsync(c.Dst, c.Data, s); err != nil {
			return "MemcpyHtoDAsync", err
		}
	}
	return "", nil
}

// queueDirectReads queues tb's direct reads on s: by the copy kernel where
// the plan loaded it and the read qualifies (kernelread.go), else by DMA.
func (e *Engine[E]) queueDirectReads(s driver.Stream, tb *Batch) (string, error) {
	for _, c := range tb.DirectRds {
		if x := tb.x; x != nil && x.copyOut != 0 && e.directKernelRead(&x.t, tb, c) {
			if err := e.queueKernelRead(x.copyOut, s, c.Src, c.Out); err != nil {
				return "Launch", err
			}
			x.kernelReads++
			continue
		}
		if err := e.drv.MemcpyDtoHAsync(c.Out, c.Src, s); err != nil {
			return "MemcpyDtoHAsync", err
		}
	}
	return "", nil
}
