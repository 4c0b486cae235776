package transfer

import (
	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
)

// A Direct plan moves one copy between the device and host memory the
// caller pinned through the Backend (the registry's regions), with one DMA
// and one fence and no staging.

// uploadDirect moves data (inside reg, pinned) to device address dst with
// one DMA and one fence. If the stream cannot be drained after a failure,
// reg keeps its pending use: the DMA may still read it, so it must not be
// freed.
func (e *Engine[E]) uploadDirect(op string, bufs []E, reg *hostmem.Region, dst uint64, data []byte, requested int) error {
	err := e.directCopy(op, bufs, reg, "MemcpyHtoDAsync", func(s driver.Stream) error {
		return e.drv.MemcpyHtoDAsync(dst, data, s)
	})
	if err != nil {
		return err
	}
	e.tel.H2DBytes.Add(uint64(len(data)))
	e.tel.UploadOps.Add(1)
	e.tel.Requested.Add(uint64(requested))
	return nil
}

// downloadDirect moves len(out) bytes from device address src into out
// (inside reg, pinned) with one DMA and one fence. After a failure out may
// hold some of the bytes; as with uploadDirect, reg keeps its pending use
// when the stream cannot be drained, and the DMA may then write out after
// the call returned, whenever a quarantine retry synchronizes the stream
// (nothing cheaper can stop a queued DMA). The pending use keeps reg from
// being freed or unpinned until then, and the Backend's Close leaves it
// pinned if that never happens.
func (e *Engine[E]) downloadDirect(op string, bufs []E, reg *hostmem.Region, out []byte, src uint64) error {
	err := e.directCopy(op, bufs, reg, "MemcpyDtoHAsync", func(s driver.Stream) error {
		return e.drv.MemcpyDtoHAsync(out, src, s)
	})
	if err != nil {
		return err
	}
	e.tel.D2HBytes.Add(uint64(len(out)))
	e.tel.ReadbackOps.Add(1)
	e.tel.Requested.Add(1)
	return nil
}

// directCopy queues one DMA (named call, for errors) on a leased stream and
// fences it, counting the fence and the copy. reg's pending use is dropped
// unless a failed stream could not be drained.
func (e *Engine[E]) directCopy(op string, bufs []E, reg *hostmem.Region, call string, queue func(driver.Stream) error) error {
	lease, err := e.launch.Lease(op, false)
	if err != nil {
		e.pinned.Done(reg)
		return err
	}
	fail := func(call string, err error) error {
		// When the drain fails the quarantine takes over reg's pending use
		// and drops it once the stream synchronizes.
		if e.SyncOrQuarantine(op, InUse[E]{Bufs: bufs, Regs: []*hostmem.Region{reg}}, lease) {
			e.pinned.Done(reg)
		}
		return errs.Driver(op, call, err)
	}
	if err := queue(lease.Stream); err != nil {
		return fail(call, err)
	}
	if err := e.drv.StreamSynchronize(lease.Stream); err != nil {
		return fail("StreamSynchronize", err)
	}
	e.launch.Return(lease, true)
	e.pinned.Done(reg)
	e.tel.SyncPoints.Add(1)
	e.tel.DeviceCopies.Add(1)
	return nil
}
