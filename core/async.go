package core

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/vyre-go/vyrecuda/accounting"
)

// asyncUploads is the bookkeeping of uploads queued by UploadAsync
// and not yet synchronized.
type asyncUploads struct {
	// mu guards every field below, and serializes queueing with
	// SynchronizeUploads so no copy lands on a stream being given back.
	mu    sync.Mutex
	lease *launchLease // the backend-owned stream; nil when nothing is queued
	ents  []*residentEntry
	regs  []*pinnedRegion
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
	ents, err := b.pinEntries(op, bufs, nil)
	if err != nil {
		return err
	}
	kept := 0 // ents[:kept] hold copies that were queued
	defer func() {
		b.unpinEntries(op, ents[kept:])
		if kept > 0 {
			b.tel.uploadOps.Add(1) // one upload operation per call, as Upload counts
		}
	}()
	dsts, err := asyncTargets(op, ups, ents)
	if err != nil {
		return err
	}
	b.async.mu.Lock()
	defer b.async.mu.Unlock()
	regs, err := b.pinned.pend(op, ups)
	if err != nil {
		return err
	}
	created := false
	if b.async.lease == nil && len(regs) > 0 {
		lease, err := b.lease(op, false)
		if err != nil {
			b.pinned.unpend(regs)
			return err
		}
		b.async.lease, created = lease, true
	}
	// Only the items with bytes keep their buffers in flight; ents is
	// reordered so that those come first as they are queued.
	for i, u := range ups {
		if len(u.Data) == 0 {
			continue
		}
		if err := b.drv.MemcpyHtoDAsync(dsts[i], u.Data, b.async.lease.Stream); err != nil {
			b.pinned.unpend(regs[kept:])
			if created && kept == 0 {
				// A fresh stream: the failed copy was its only work.
				b.drain(op, held{}, b.async.lease)
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
		b.tel.h2dBytes.Add(uint64(len(u.Data)))
		b.tel.requested.Add(1)
		b.tel.deviceCopies.Add(1)
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
				Detail: fmt.Sprintf("%shandle %d: %d bytes at offset %d do not fit its %d bytes", pre, h.ID, len(u.Data), u.Offset, h.Len),
				Fix:    "keep offset+len(data) within the buffer's length", Err: err}
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

// pend finds the pinned region holding each non-empty item's Data and
// marks it pending, returning the regions in item order; when one is not
// pinned it marks nothing and fails.
func (r *pinnedRegistry) pend(op string, ups []UploadAt) ([]*pinnedRegion, error) {
	regs := make([]*pinnedRegion, 0, len(ups))
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, u := range ups {
		if len(u.Data) == 0 {
			continue
		}
		p := uintptr(unsafe.Pointer(unsafe.SliceData(u.Data)))
		reg := r.find(p, len(u.Data))
		if reg == nil {
			for _, r := range regs {
				r.pending--
			}
			return nil, newError(op, KindInvalidArgument,
				fmt.Sprintf("%ssource [%#x, +%d) is not inside memory pinned through this Backend", itemPrefix(len(ups), i), p, len(u.Data)),
				"copy from a PinnedBuffer's Bytes or from memory registered with PinHostBuffer, or use Upload")
		}
		reg.pending++
		regs = append(regs, reg)
	}
	return regs, nil
}

// unpend drops one pending use of each region.
func (r *pinnedRegistry) unpend(regs []*pinnedRegion) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, reg := range regs {
		reg.pending--
	}
}

func (b *Backend) unpendRegion(reg *pinnedRegion) {
	b.pinned.mu.Lock()
	reg.pending--
	b.pinned.mu.Unlock()
}

// SynchronizeUploads waits until every copy queued with UploadAsync has
// completed, then releases their buffers and
// source memory. With nothing queued it returns at once. If the wait fails,
// the uploads stay queued and the call can be retried.
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
	b.tel.syncPoints.Add(1)
	b.launch.giveBack(b.async.lease, true)
	b.async.lease = nil
	b.unpinEntries(op, b.async.ents)
	b.pinned.mu.Lock()
	for _, reg := range b.async.regs {
		reg.pending--
	}
	b.pinned.mu.Unlock()
	clear(b.async.ents)
	clear(b.async.regs)
	b.async.ents, b.async.regs, b.async.count = b.async.ents[:0], b.async.regs[:0], 0
	return nil
}
