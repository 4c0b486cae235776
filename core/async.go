package core

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/vyre-go/vyrecuda/accounting"
	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
	"github.com/vyre-go/vyrecuda/core/internal/streams"
)

// asyncUploads is the bookkeeping of uploads queued by UploadResidentAsyncAt
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

// UploadResidentAsyncAt queues a copy of n bytes from src into h at byte off
// and returns without waiting. src..src+n must lie inside memory pinned
// through this Backend (AllocHostPinned or PinHostBuffer), and must not be
// changed until SynchronizeUploads returns. The copy runs on a stream the
// Backend owns (never the legacy null stream); h stays in flight, so
// FreeResident and Close refuse it, until SynchronizeUploads. Zero bytes
// queue nothing. Copies queued here are not ordered against UploadResident
// and the other synchronous calls: synchronize first when both write the
// same bytes.
func (b *Backend) UploadResidentAsyncAt(h Buffer, off int, src unsafe.Pointer, n int) error {
	const op = "UploadResidentAsyncAt"
	if err := b.enter(op); err != nil {
		return err
	}
	defer b.exit()
	if n < 0 {
		return newError(op, KindInvalidArgument, fmt.Sprintf("length %d bytes", n), "pass a non-negative length")
	}
	ents, err := b.pinEntries(op, []Buffer{h}, nil)
	if err != nil {
		return err
	}
	e := ents[0]
	keep := false
	defer func() {
		if !keep {
			b.unpinEntries(op, ents)
		}
	}()
	if _, err := accounting.RangeEnd(off, n, h.Len); err != nil {
		return &Error{Op: op, Kind: KindInvalidArgument,
			Detail: fmt.Sprintf("handle %d: %d bytes at offset %d do not fit its %d bytes", h.ID, n, off, h.Len),
			Fix:    "keep offset+n within the buffer's length", Err: err}
	}
	if n == 0 {
		return nil
	}
	if src == nil {
		return newError(op, KindInvalidArgument, "source pointer is nil", "pass memory pinned through this Backend")
	}
	dst, err := accounting.AddPtr(e.ptr, off)
	if err != nil {
		return &Error{Op: op, Kind: KindInvalidArgument,
			Detail: fmt.Sprintf("handle %d: offset %d overflows the device address", h.ID, off),
			Fix:    "pass an offset inside the buffer", Err: err}
	}

	b.async.mu.Lock()
	defer b.async.mu.Unlock()
	reg := b.pinned.Use(uintptr(src), n)
	if reg == nil {
		return newError(op, KindInvalidArgument,
			fmt.Sprintf("source [%#x, +%d) is not inside memory pinned through this Backend", uintptr(src), n),
			"copy from an AllocHostPinned buffer or from memory registered with PinHostBuffer")
	}

	created := false
	if b.async.lease == nil {
		lease, err := b.launch.Lease(op, false)
		if err != nil {
			b.pinned.Done(reg)
			return err
		}
		b.async.lease, created = lease, true
	}
	if err := b.drv.MemcpyHtoDAsync(dst, unsafe.Slice((*byte)(src), n), b.async.lease.Stream); err != nil {
		b.pinned.Done(reg)
		if created {
			// A fresh stream: the failed copy was its only work.
			b.xfer.SyncOrQuarantine(op, held{}, b.async.lease)
			b.async.lease = nil
		}
		return driverError(op, "MemcpyHtoDAsync", err)
	}
	keep = true
	b.async.ents = append(b.async.ents, e)
	b.async.regs = append(b.async.regs, reg)
	b.async.count++
	b.tel.H2DBytes.Add(uint64(n))
	b.tel.UploadOps.Add(1)
	b.tel.Requested.Add(1)
	b.tel.DeviceCopies.Add(1)
	return nil
}

// SynchronizeUploads waits until every upload queued with
// UploadResidentAsyncAt has completed, then releases their buffers and
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
	b.tel.SyncPoints.Add(1)
	b.launch.Return(b.async.lease, true)
	b.async.lease = nil
	b.unpinEntries(op, b.async.ents)
	b.pinned.Done(b.async.regs...)
	clear(b.async.ents)
	clear(b.async.regs)
	b.async.ents, b.async.regs, b.async.count = b.async.ents[:0], b.async.regs[:0], 0
	return nil
}
