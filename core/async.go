package core

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/vyre-go/vyrecuda/accounting"
	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
	"github.com/vyre-go/vyrecuda/core/internal/streams"
)

// asyncUploads is the bookkeeping of uploads queued by UploadAsync
// and not yet synchronized.
type asyncUploads struct {
	// mu guards every field below, and serializes queueing with
	// SynchronizeUploads so no copy lands on a stream being given back.
	mu    sync.Mutex
	lease *streams.Lease // the backend-owned stream; nil when nothing is queued
	ents  []*residentEntry
	regs  []*hostmem.Region
	count int
}

// queued returns how many uploads are queued and not synchronized.
func (a *asyncUploads) queued() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.count
}

// UploadAsync queues each item's copy from pinned host memory into its
// buffer and returns without waiting; SynchronizeUploads waits for every
// copy queued so far. Each item's Data must lie inside memory pinned
// through this Backend (PinnedBuffer.Bytes, or memory registered with
// PinHostBuffer): the device reads it in place, so it must not change until
// SynchronizeUploads returns. Every item is checked (a live, writable
// buffer, a range inside it, a pinned source) before anything is queued, and
// a bad item fails the call with nothing queued. The copies run in order on
// one stream the Backend owns (never the legacy null stream), and their
// buffers stay in flight, so Free and Close refuse them, until
// SynchronizeUploads. Empty Data queues nothing. Copies queued here are not
// ordered against Upload and the other synchronous calls: synchronize first
// when both write the same bytes. If the driver fails to queue a copy, the
// copies before it stay queued (SynchronizeUploads completes them) and the
// rest are not.
func (b *Backend) UploadAsync(ups ...UploadAt) error {
	const op = "UploadAsync"
	if err := b.enter(op); err != nil {
		return err
	}
	defer b.exit()
	bufs := make([]Buffer, len(ups))
	for i, u := range ups {
		bufs[i] = u.Buf
	}
	ents, err := b.store.pinEntries(op, bufs, nil)
	if err != nil {
		return err
	}
	kept := 0 // ents[:kept] hold copies that were queued
	defer func() {
		b.store.unpinEntries(op, ents[kept:])
		if kept > 0 {
			b.tel.UploadOps.Add(1) // one upload operation per call, as Upload counts
		}
	}()
	dsts, err := asyncTargets(op, ups, ents)
	if err != nil {
		return err
	}
	b.async.mu.Lock()
	defer b.async.mu.Unlock()
	regs, err := pendSources(&b.pinned, op, ups)
	if err != nil {
		return err
	}
	created := false
	if b.async.lease == nil && len(regs) > 0 {
		lease, err := b.launch.Lease(op, false)
		if err != nil {
			b.pinned.Done(regs...)
			return err
		}
		b.async.lease, created = lease, true
	} else if len(regs) > 0 {
		// The held stream was ordered when it was leased: order it after
		// the unfenced uploads made since.
		if err := b.launch.Order(op, b.async.lease); err != nil {
			b.pinned.Done(regs...)
			return err
		}
	}
	// Only the items with bytes keep their buffers in flight; ents is
	// reordered so that those come first as they are queued.
	for i, u := range ups {
		if len(u.Data) == 0 {
			continue
		}
		if err := b.drv.MemcpyHtoDAsync(dsts[i], u.Data, b.async.lease.Stream); err != nil {
			b.pinned.Done(regs[kept:]...)
			if created && kept == 0 {
				// A fresh stream: the failed copy was its only work.
				b.xfer.SyncOrQuarantine(op, held{}, b.async.lease)
				b.async.lease = nil
			}
			e := driverError(op, "MemcpyHtoDAsync", err)
			e.Detail = itemPrefix(len(ups), i) + e.Detail
			return e
		}
		ents[kept], ents[i] = ents[i], ents[kept]
		b.async.ents = append(b.async.ents, ents[kept])
		b.async.regs = append(b.async.regs, regs[kept])
		kept++
		b.async.count++
		b.tel.H2DBytes.Add(uint64(len(u.Data)))
		b.tel.Requested.Add(1)
		b.tel.DeviceCopies.Add(1)
	}
	return nil
}

// asyncTargets checks UploadAsync's items against their pinned entries
// (writable, range inside the buffer, no address overflow) and returns each
// copy's device address.
func asyncTargets(op string, ups []UploadAt, ents []*residentEntry) ([]uint64, error) {
	dsts := make([]uint64, len(ups))
	for i, u := range ups {
		h, pre := u.Buf, itemPrefix(len(ups), i)
		if ents[i].static.Load() {
			e := staticWrite(op, h)
			e.Detail = pre + e.Detail
			return nil, e
		}
		if _, err := accounting.RangeEnd(u.Offset, len(u.Data), h.Len); err != nil {
			return nil, &Error{Op: op, Kind: KindInvalidArgument,
				Detail: fmt.Sprintf("%shandle %d: %d bytes at offset %d do not fit its %d bytes: %s", pre, h.ID, len(u.Data), u.Offset, h.Len, rangeWhy(u.Offset, len(u.Data), h.Len)),
				Fix:    "keep offset+len(data) within the buffer's length"}
		}
		if len(u.Data) == 0 {
			continue
		}
		dst, err := accounting.AddPtr(ents[i].ptr, u.Offset)
		if err != nil {
			return nil, &Error{Op: op, Kind: KindInvalidArgument,
				Detail: fmt.Sprintf("%shandle %d: offset %d overflows the device address", pre, h.ID, u.Offset),
				Fix:    "pass an offset inside the buffer", Err: err}
		}
		dsts[i] = dst
	}
	return dsts, nil
}

// pendSources finds the region of pinned holding each non-empty item's
// Data and counts one use of it, returning the regions in item order; when
// one is not pinned it counts nothing and fails.
func pendSources(pinned *hostmem.Registry, op string, ups []UploadAt) ([]*hostmem.Region, error) {
	regs := make([]*hostmem.Region, 0, len(ups))
	for i, u := range ups {
		if len(u.Data) == 0 {
			continue
		}
		p := uintptr(unsafe.Pointer(unsafe.SliceData(u.Data)))
		reg := pinned.Use(p, len(u.Data))
		if reg == nil {
			pinned.Done(regs...)
			return nil, newError(op, KindInvalidArgument,
				fmt.Sprintf("%ssource [%#x, +%d) is not inside memory pinned through this Backend", itemPrefix(len(ups), i), p, len(u.Data)),
				"copy from a PinnedBuffer's Bytes or from memory registered with PinHostBuffer, or use Upload")
		}
		regs = append(regs, reg)
	}
	return regs, nil
}

// SynchronizeUploads waits until every copy queued with UploadAsync has
// completed, then releases their buffers and source memory. With nothing
// queued it returns at once. If the wait fails, the uploads stay queued and
// the call can be retried.
func (b *Backend) SynchronizeUploads() error {
	const op = "SynchronizeUploads"
	if err := b.enter(op); err != nil {
		return err
	}
	defer b.exit()
	b.async.mu.Lock()
	defer b.async.mu.Unlock()
	if b.async.lease == nil {
		return nil
	}
	if err := b.drv.StreamSynchronize(b.async.lease.Stream); err != nil {
		return driverError(op, "StreamSynchronize", err)
	}
	b.tel.SyncPoints.Add(1)
	b.launch.Return(b.async.lease, true)
	b.async.lease = nil
	b.store.unpinEntries(op, b.async.ents)
	b.pinned.Done(b.async.regs...)
	clear(b.async.ents)
	clear(b.async.regs)
	b.async.ents, b.async.regs, b.async.count = b.async.ents[:0], b.async.regs[:0], 0
	return nil
}
