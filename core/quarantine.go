package core

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
)

// A call whose device work failed drains its streams with one more
// StreamSynchronize before it gives anything back (drain). When that drain
// fails too, work may still be queued on the stream: copies that read or
// write the call's pinned staging, its device staging and the resident
// buffers it targets. None of that may go back to a pool, be freed or be
// handed to another buffer while the work can still run, and the stream
// cannot be destroyed or reused. So the leases, staging blocks, device
// staging allocations and an in-flight reference on each resident buffer
// move into the Backend's quarantine instead.
//
// The quarantine is retried (one StreamSynchronize per held stream) at
// cheap moments that need no lock but its own: before every lease
// acquisition, when Free finds a buffer in flight (PinnedBuffer.Free
// and UnpinHostBuffer pinned memory a direct copy holds), and at Close.
// A stream that synchronizes gives everything of its entry back normally.
// Close gives up on streams that still fail (settleQuarantine): on a real
// device a StreamSynchronize that keeps failing almost always means a sticky
// error that broke the context, so their work will never run; Close then
// destroys their streams and events (CUDA releases a stream with pending work
// once the work ends or the context goes), and deliberately leaves the
// memory their work may touch allocated, staging and resident buffers alike,
// to be reclaimed with the context, and reports ErrDriver.
//
// A peer copy runs on the destination Backend's stream but reads the source
// Backend's buffers. When its drain fails, each side is quarantined on its
// own Backend: the destination holds the stream and its own buffers, the
// source holds an item of its own with its buffers' references, waiting for
// the destination's item (waitFor). The source's retries first retry the
// destination's quarantine (without holding their own lock, and without
// going further, so two Backends waiting on each other cannot recurse), and
// the source's Close reports a wait that never ended as memory left
// allocated, as for its own streams.

// quarantined is what one failed call's undrained work may still use.
type quarantined struct {
	op     string
	leases []*launchLease   // streams whose drain failed; shrinks as retries succeed
	host   []pinnedBlock    // pinned staging blocks
	dev    []deviceAlloc    // device staging allocations
	ents   []*residentEntry // one in-flight reference each, the quarantine's own
	regs   []*pinnedRegion  // caller-pinned host memory a direct DMA may still use
	err    error            // the latest synchronization failure
	// discard gives leases back unhealthy once they synchronize (held.discard).
	discard bool
	// released, when set, is stored true once this item is released: a
	// peer's item waits for it.
	released *atomic.Bool
	// waitFor, when set, marks an item with no streams of its own (the
	// source side of a failed peer copy): it is released once waitFor is
	// true, after owner (the Backend whose stream runs the copy) released
	// its item.
	waitFor *atomic.Bool
	owner   *Backend
}

// quarantine holds the quarantined entries of a Backend.
type quarantine struct {
	mu      sync.Mutex // guards items; taken after async.mu, never with store.mu or another Backend's quar.mu held; pinned.mu is taken inside it
	items   []*quarantined
	leases  atomic.Int64 // leases held over all items, readable without mu
	refs    atomic.Int64 // in-flight references held over all items
	waiting atomic.Int64 // items waiting for another Backend's item
}

// held is what a failed call's queued work may still read or write: its
// staging (released by the caller's deferred release unless detached), its
// device staging allocations (put back by the caller unless zeroed) and the
// resident buffers it targets, and the caller-pinned regions a direct DMA
// reads or writes (each holding one pending use that the quarantine takes
// over when the drain fails). discard gives leases that do drain back
// unhealthy (their events saw the failure). peerEnts are resident buffers of
// peer, another Backend, that the work reads (a peer copy's sources): they
// are quarantined on peer, not on the Backend that drains.
type held struct {
	st       []*staging
	dev      []*deviceAlloc
	ents     []*residentEntry
	regs     []*pinnedRegion
	discard  bool
	peer     *Backend
	peerEnts []*residentEntry
}

// drain synchronizes the streams of leases after a failed call, so nothing
// their queued work uses goes back while the work may still run. A lease
// whose stream drains goes back to the pool (healthy unless h.discard). When
// any drain fails, those leases and everything in h move to the quarantine:
// h's stagings are detached and its device allocations zeroed, so the
// caller's deferred releases find nothing, and each of h.ents gets an
// in-flight reference of the quarantine's own (the caller still drops its
// own). h.peerEnts get theirs from an item on h.peer's quarantine that is
// released once this one is. Every lease is given back or quarantined here:
// callers must not give them back again. It reports whether every stream
// drained.
func (b *Backend) drain(op string, h held, leases ...*launchLease) bool {
	var stuck []*launchLease
	var last error
	for _, l := range leases {
		if l == nil {
			continue
		}
		if err := b.drv.StreamSynchronize(l.Stream); err != nil {
			b.log.Error("stream could not be drained after a failed call; quarantined", "op", op, "err", err)
			stuck, last = append(stuck, l), err
			continue
		}
		b.launch.giveBack(l, !h.discard)
	}
	if len(stuck) == 0 {
		return true
	}
	q := &quarantined{op: op, leases: stuck, err: last, discard: h.discard}
	for _, st := range h.st {
		q.host = append(q.host, st.detach()...)
	}
	for _, d := range h.dev {
		if d.ptr != 0 {
			q.dev = append(q.dev, *d)
			*d = deviceAlloc{}
		}
	}
	q.ents = append(q.ents, h.ents...)
	q.regs = append(q.regs, h.regs...)
	if h.peer == nil || h.peer == b {
		q.ents = append(q.ents, h.peerEnts...)
	} else if len(h.peerEnts) > 0 {
		q.released = new(atomic.Bool)
		h.peer.quarantineWaiting(&quarantined{op: op, ents: append([]*residentEntry(nil), h.peerEnts...),
			err: last, waitFor: q.released, owner: b})
	}
	for _, e := range q.ents {
		e.inflight.Add(1)
	}
	b.quar.mu.Lock()
	b.quar.items = append(b.quar.items, q)
	b.quar.leases.Add(int64(len(stuck)))
	b.quar.refs.Add(int64(len(q.ents)))
	b.quar.mu.Unlock()
	return false
}

// quarantineWaiting adds q, an item with no streams of its own that waits
// for another Backend's item, taking an in-flight reference on its entries.
func (b *Backend) quarantineWaiting(q *quarantined) {
	for _, e := range q.ents {
		e.inflight.Add(1)
	}
	b.quar.mu.Lock()
	b.quar.items = append(b.quar.items, q)
	b.quar.waiting.Add(1)
	b.quar.refs.Add(int64(len(q.ents)))
	b.quar.mu.Unlock()
}

// lease retries the quarantine, then leases launch resources.
func (b *Backend) lease(op string, timing bool) (*launchLease, error) {
	b.retryQuarantine()
	return b.launch.lease(op, timing)
}

// retryQuarantine synchronizes every quarantined stream once and releases
// the entries whose streams all synchronized; items waiting for another
// Backend's item retry that Backend's quarantine first. It makes no driver
// call when the quarantine is empty. It reports whether the quarantine is
// empty now.
func (b *Backend) retryQuarantine() bool {
	if b.quar.leases.Load() == 0 && b.quar.waiting.Load() == 0 {
		return true
	}
	for _, o := range b.quarantineOwners() {
		o.retryOwn()
	}
	return b.retryOwn()
}

// quarantineOwners returns the Backends whose items b's waiting items wait
// for, each once.
func (b *Backend) quarantineOwners() []*Backend {
	if b.quar.waiting.Load() == 0 {
		return nil
	}
	b.quar.mu.Lock()
	defer b.quar.mu.Unlock()
	var owners []*Backend
	for _, q := range b.quar.items {
		if q.owner != nil && !slices.Contains(owners, q.owner) {
			owners = append(owners, q.owner)
		}
	}
	return owners
}

// retryOwn is retryQuarantine without retrying other Backends first.
func (b *Backend) retryOwn() bool {
	if b.quar.leases.Load() == 0 && b.quar.waiting.Load() == 0 {
		return true
	}
	b.quar.mu.Lock()
	defer b.quar.mu.Unlock()
	kept := b.quar.items[:0]
	for _, q := range b.quar.items {
		if !b.retryEntry(q) {
			kept = append(kept, q)
		}
	}
	clear(b.quar.items[len(kept):])
	b.quar.items = kept
	return len(kept) == 0
}

// retryEntry synchronizes q's streams, gives back those that synchronized
// and, when none is left (and the item q waits for, if any, was released),
// releases everything q holds. It reports whether q is released. Callers
// hold quar.mu.
func (b *Backend) retryEntry(q *quarantined) bool {
	kept := q.leases[:0]
	for _, l := range q.leases {
		if err := b.drv.StreamSynchronize(l.Stream); err != nil {
			q.err = err
			kept = append(kept, l)
			continue
		}
		b.launch.giveBack(l, !q.discard)
		b.quar.leases.Add(-1)
	}
	clear(q.leases[len(kept):])
	q.leases = kept
	if len(kept) > 0 || (q.waitFor != nil && !q.waitFor.Load()) {
		return false
	}
	if q.waitFor != nil {
		b.quar.waiting.Add(-1)
	}
	for _, blk := range q.host {
		b.hostPool.put(blk)
	}
	for _, d := range q.dev {
		b.devPool.put(d)
	}
	b.unpinEntries(q.op, q.ents)
	for _, reg := range q.regs {
		b.unpendRegion(reg)
	}
	b.quar.refs.Add(-int64(len(q.ents)))
	released := q.released
	*q = quarantined{}
	if released != nil {
		released.Store(true)
	}
	return true
}

// settleQuarantine empties the quarantine for Close: each entry is retried
// once more (the Backends that items wait for first) and released when its
// streams synchronize. For the streams that still fail it destroys their
// launch resources and leaves what their work may touch allocated (staging
// blocks and device staging are dropped from their pools' reach; resident
// buffers keep the quarantine's in-flight reference, which releaseAll
// respects, and caller-pinned regions of direct copies their pending use,
// which pinnedRegistry.releaseAll respects), and returns an ErrDriver
// saying so; the same for buffers a
// failed peer copy on another Backend's stream may still read. Close calls
// it with life held exclusively.
func (b *Backend) settleQuarantine(op string) error {
	for _, o := range b.quarantineOwners() {
		o.retryOwn()
	}
	b.quar.mu.Lock()
	defer b.quar.mu.Unlock()
	var (
		streams, peerWaits, bufs, regs int
		hostBytes, devBytes, regBytes  uint64
		ops                            []string
		last                           error
	)
	for _, q := range b.quar.items {
		if b.retryEntry(q) {
			continue
		}
		for _, l := range q.leases {
			b.launch.giveBack(l, false)
		}
		b.quar.leases.Add(-int64(len(q.leases)))
		streams += len(q.leases)
		if q.waitFor != nil {
			b.quar.waiting.Add(-1)
			peerWaits++
		}
		for _, blk := range q.host {
			hostBytes += uint64(len(blk.buf))
		}
		for _, d := range q.dev {
			devBytes += d.blk.Size
		}
		bufs += len(q.ents)
		for _, reg := range q.regs {
			regs++
			regBytes += uint64(reg.n)
		}
		ops = append(ops, q.op)
		last = q.err
	}
	clear(b.quar.items)
	b.quar.items = nil
	if streams == 0 && peerWaits == 0 {
		return nil
	}
	e := driverError(op, "StreamSynchronize", last)
	e.Detail = fmt.Sprintf("%d stream(s) of this Backend and %d of other Backends (peer copies reading this Backend's buffers), "+
		"of failed calls %v, could not be synchronized; their work may still use "+
		"%d bytes of pinned staging, %d bytes of device staging, %d resident buffer(s) and %d caller-pinned host range(s) (%d bytes), left allocated",
		streams, peerWaits, ops, hostBytes, devBytes, bufs, regs, regBytes)
	e.Fix = "the device context is most likely broken by a sticky error: end the process or reset the device; " +
		"the memory left allocated is reclaimed with the context"
	b.log.Error("Close left memory of unsynchronized streams allocated", "op", op, "streams", streams,
		"peerStreams", peerWaits, "pinnedBytes", hostBytes, "deviceBytes", devBytes, "residentBuffers", bufs, "err", last)
	return e
}
