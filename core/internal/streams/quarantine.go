package streams

import (
	"slices"
	"sync"
	"sync/atomic"
)

// The quarantine.
//
// A call whose device work failed synchronizes its streams once more
// before it gives anything back (SyncOrQuarantine). When that fails too,
// work may still be queued on a stream and use what the call held, and the
// stream can be neither destroyed nor reused. So the leases move into the
// Pool's quarantine, with Items: what the work may still use, each with a
// callback that releases it. The caller describes them (Hold) only when a
// stream is stuck, and moves them out of its own reach as it does.
//
// The quarantine is retried (one StreamSynchronize per held stream) by
// RetryQuarantine and before every Lease. An entry whose streams all
// synchronize returns them and releases its items. SettleQuarantine, at
// Close, gives up on the streams that still fail: it destroys their
// resources and reports what their items hold, without releasing them.
//
// Work on one device may read memory of another (a peer copy): its Hold
// names the other device's Pool (Peer) and the items there (PeerItems).
// Those go into an entry of the peer's quarantine with no streams of its
// own, which waits for this entry to be released (waitFor). The peer's
// retries first retry the quarantines it waits for (without holding their
// own lock, and without going further, so two Pools waiting on each other
// cannot recurse).

// ItemKind says what an Item is, for SettleQuarantine's report.
type ItemKind int

// The kinds of Item.
const (
	PinnedStaging ItemKind = iota // a block of pinned host staging
	DeviceStaging                 // a device staging allocation
	BufferRef                     // an in-flight reference on a resident buffer (QuarantinedRefs counts them)
	PinnedRange                   // a pending use of caller-pinned host memory a direct copy reads or writes
	NumItemKinds                  // the number of kinds, which sizes Abandoned's tallies
)

// Item is one thing a failed call's queued work may still use. Release
// gives it back once the work's streams have synchronized; it is called
// exactly once, or never when SettleQuarantine gives up on the streams.
// Release runs with the quarantine's lock held: it must not call back into
// a Pool. Bytes is its size, for the report.
type Item struct {
	Kind    ItemKind
	Bytes   uint64
	Release func()
}

// Hold is what a failed call's queued work may still use: Items, and
// PeerItems of another Pool, Peer, that the work also uses (a peer copy
// reading another device's buffers). A nil Peer, or the draining Pool
// itself, holds PeerItems with Items.
type Hold struct {
	Items     []Item
	Peer      *Pool
	PeerItems []Item
}

// Abandoned is what SettleQuarantine gave up on: Streams of this Pool that
// never synchronized (their resources are destroyed) and PeerWaits, entries
// that waited for another Pool's entry that was never released; the failed
// calls' names (Ops, one per entry), the latest synchronization failure
// (Err), and per ItemKind the number (Count) and bytes (Bytes) of the items
// left unreleased.
type Abandoned struct {
	Streams, PeerWaits int
	Ops                []string
	Err                error
	Count              [NumItemKinds]int
	Bytes              [NumItemKinds]uint64
}

// Empty reports whether nothing was abandoned.
func (a Abandoned) Empty() bool { return a.Streams == 0 && a.PeerWaits == 0 }

// entry is what one failed call's unsynchronized work may still use.
type entry struct {
	op     string
	leases []*Lease // streams whose synchronization failed; shrinks as retries succeed
	items  []Item
	refs   int   // BufferRef items among items
	err    error // the latest synchronization failure
	// discard returns leases destroyed once they synchronize.
	discard bool
	// released, when set, is stored true once this entry is released: an
	// entry of a peer's quarantine waits for it.
	released *atomic.Bool
	// waitFor, when set, marks an entry with no streams of its own (the
	// peer side of a failed call): it is released once waitFor is true,
	// after owner (the Pool whose stream runs the work) released its entry.
	waitFor *atomic.Bool
	owner   *Pool
}

// quarantine holds the entries of a Pool. mu guards entries; it is held
// across the retries' StreamSynchronize and the items' releases, and never
// together with another Pool's quar.mu.
type quarantine struct {
	mu      sync.Mutex
	entries []*entry
	leases  atomic.Int64 // leases held over all entries, readable without mu
	refs    atomic.Int64 // BufferRef items held over all entries
	waiting atomic.Int64 // entries waiting for another Pool's entry
}

// SyncOrQuarantine synchronizes the streams of leases after a failed call,
// so nothing their queued work uses goes back while the work may still
// run. A lease whose stream synchronizes is returned (healthy unless
// discard). When any fails, hold is called once for what the work may
// still use, and those leases and that Hold move to the quarantine (the
// items of another Pool to that Pool's). Every lease is returned or
// quarantined here: callers must not return them again. It reports whether
// every stream synchronized.
func (p *Pool) SyncOrQuarantine(op string, discard bool, hold func() Hold, leases ...*Lease) bool {
	var stuck []*Lease
	var last error
	for _, l := range leases {
		if l == nil {
			continue
		}
		if err := p.drv.StreamSynchronize(l.Stream); err != nil {
			p.log.Error("stream could not be drained after a failed call; quarantined", "op", op, "err", err)
			stuck, last = append(stuck, l), err
			continue
		}
		p.Return(l, !discard)
	}
	if len(stuck) == 0 {
		return true
	}
	var h Hold
	if hold != nil {
		h = hold()
	}
	q := &entry{op: op, leases: stuck, err: last, discard: discard}
	q.add(h.Items)
	if h.Peer == nil || h.Peer == p {
		q.add(h.PeerItems)
	} else if len(h.PeerItems) > 0 {
		q.released = new(atomic.Bool)
		w := &entry{op: op, err: last, waitFor: q.released, owner: p}
		w.add(h.PeerItems)
		h.Peer.quar.insert(w)
	}
	p.quar.insert(q)
	return false
}

// add appends items to q, counting its BufferRef items.
func (q *entry) add(items []Item) {
	for _, it := range items {
		if it.Kind == BufferRef {
			q.refs++
		}
	}
	q.items = append(q.items, items...)
}

// insert adds q and counts its leases, references and wait.
func (qu *quarantine) insert(q *entry) {
	qu.mu.Lock()
	qu.entries = append(qu.entries, q)
	qu.leases.Add(int64(len(q.leases)))
	qu.refs.Add(int64(q.refs))
	if q.waitFor != nil {
		qu.waiting.Add(1)
	}
	qu.mu.Unlock()
}

// QuarantinedLeases returns how many leases the quarantine holds, without
// taking a lock: zero means no held stream can release anything.
func (p *Pool) QuarantinedLeases() int64 { return p.quar.leases.Load() }

// QuarantinedRefs returns how many BufferRef items the quarantine holds,
// without taking a lock.
func (p *Pool) QuarantinedRefs() int64 { return p.quar.refs.Load() }

// RetryQuarantine synchronizes every quarantined stream once and releases
// the entries whose streams all synchronized; entries waiting for another
// Pool's entry retry that Pool's quarantine first. It makes no driver call
// when the quarantine is empty. It reports whether the quarantine is empty
// now.
func (p *Pool) RetryQuarantine() bool {
	if p.quar.leases.Load() == 0 && p.quar.waiting.Load() == 0 {
		return true
	}
	for _, o := range p.owners() {
		o.retryOwn()
	}
	return p.retryOwn()
}

// owners returns the Pools whose entries p's waiting entries wait for,
// each once.
func (p *Pool) owners() []*Pool {
	if p.quar.waiting.Load() == 0 {
		return nil
	}
	p.quar.mu.Lock()
	defer p.quar.mu.Unlock()
	var owners []*Pool
	for _, q := range p.quar.entries {
		if q.owner != nil && !slices.Contains(owners, q.owner) {
			owners = append(owners, q.owner)
		}
	}
	return owners
}

// retryOwn is RetryQuarantine without retrying other Pools first.
func (p *Pool) retryOwn() bool {
	if p.quar.leases.Load() == 0 && p.quar.waiting.Load() == 0 {
		return true
	}
	p.quar.mu.Lock()
	defer p.quar.mu.Unlock()
	kept := p.quar.entries[:0]
	for _, q := range p.quar.entries {
		if !p.retry(q) {
			kept = append(kept, q)
		}
	}
	clear(p.quar.entries[len(kept):])
	p.quar.entries = kept
	return len(kept) == 0
}

// retry synchronizes q's streams, returns those that synchronized and,
// when none is left (and the entry q waits for, if any, was released),
// releases q's items. It reports whether q is released. Callers hold
// quar.mu.
func (p *Pool) retry(q *entry) bool {
	kept := q.leases[:0]
	for _, l := range q.leases {
		if err := p.drv.StreamSynchronize(l.Stream); err != nil {
			q.err = err
			kept = append(kept, l)
			continue
		}
		p.Return(l, !q.discard)
		p.quar.leases.Add(-1)
	}
	clear(q.leases[len(kept):])
	q.leases = kept
	if len(kept) > 0 || (q.waitFor != nil && !q.waitFor.Load()) {
		return false
	}
	if q.waitFor != nil {
		p.quar.waiting.Add(-1)
	}
	for _, it := range q.items {
		if it.Release != nil {
			it.Release()
		}
	}
	p.quar.refs.Add(-int64(q.refs))
	released := q.released
	*q = entry{}
	if released != nil {
		released.Store(true)
	}
	return true
}

// SettleQuarantine empties the quarantine, for Close: each entry is retried
// once more (the Pools that entries wait for first) and released when its
// streams synchronize. For the streams that still fail it destroys their
// resources and leaves their items unreleased (BufferRef items stay counted
// by QuarantinedRefs), and reports them; likewise entries still waiting
// for another Pool's entry.
func (p *Pool) SettleQuarantine() Abandoned {
	for _, o := range p.owners() {
		o.retryOwn()
	}
	p.quar.mu.Lock()
	defer p.quar.mu.Unlock()
	var a Abandoned
	for _, q := range p.quar.entries {
		if p.retry(q) {
			continue
		}
		for _, l := range q.leases {
			p.Return(l, false)
		}
		p.quar.leases.Add(-int64(len(q.leases)))
		a.Streams += len(q.leases)
		if q.waitFor != nil {
			p.quar.waiting.Add(-1)
			a.PeerWaits++
		}
		for _, it := range q.items {
			if it.Kind >= 0 && it.Kind < NumItemKinds {
				a.Count[it.Kind]++
				a.Bytes[it.Kind] += it.Bytes
			}
		}
		a.Ops = append(a.Ops, q.op)
		a.Err = q.err
	}
	clear(p.quar.entries)
	p.quar.entries = nil
	return a
}
