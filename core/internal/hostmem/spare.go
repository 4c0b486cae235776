package hostmem

import (
	"sync"
	"sync/atomic"
	"time"
)

// inflight counts background work that others wait for; unlike a
// sync.WaitGroup, work may start while someone waits. Its cond's L must be
// &mu (New sets it).
type inflight struct {
	mu   sync.Mutex
	cond sync.Cond
	n    int
}

// add counts one more piece of work.
func (f *inflight) add() {
	f.mu.Lock()
	f.n++
	f.mu.Unlock()
}

// done counts one piece of work as ended.
func (f *inflight) done() {
	f.mu.Lock()
	if f.n--; f.n == 0 {
		f.cond.Broadcast()
	}
	f.mu.Unlock()
}

// wait returns once no work is counted.
func (f *inflight) wait() {
	f.mu.Lock()
	for f.n > 0 {
		f.cond.Wait()
	}
	f.mu.Unlock()
}

// bucketUse is how the blocks of one bucket are used.
type bucketUse struct {
	waits atomic.Uint32 // Lends that waited for an eviction to give a block back
	out   atomic.Int32  // blocks calls hold (lent and not yet returned)
	peak  atomic.Int32  // the most blocks calls held at once
	live  atomic.Int32  // blocks allocated and not freed
	// pending counts spare blocks being allocated (orderSpares).
	pending atomic.Int32
	// lastOne is when a readback that found no second set last ended, in
	// nanoseconds since the Unix epoch (wantTwoSets, oneSetEnded).
	lastOne atomic.Int64
	// failed is when a spare allocation of the bucket last failed, in
	// nanoseconds since the Unix epoch; 0 after one succeeded.
	failed atomic.Int64
}

// checkOut counts a block of u's bucket handed to a call.
func (u *bucketUse) checkOut() {
	n := u.out.Add(1)
	for p := u.peak.Load(); n > p && !u.peak.CompareAndSwap(p, n); p = u.peak.Load() {
	}
}

// spareAfterWaits is how many times Lends of one bucket wait for an
// eviction before the bucket gets spare blocks. Readbacks that evict their
// staging after returning (evict.go) and follow one another leave the
// next call waiting for the last one's staging: on the reference H100
// host a 1 MiB DMA into staging just evicted took 26-27 us and into
// staging still cached 47-58 us, while evicting 1 MiB took 13 us on 8
// threads. A bucket that waited twice has readbacks back to back: it gets
// a second set of blocks, evicted while the other set is in use, and keeps
// it (the cache holds it) until Trim or Close. Sporadic readbacks never
// wait, so never cost a second set.
const spareAfterWaits = 2

// DefaultSpareRetry is how long after a spare allocation of a bucket
// failed no other is tried (unless a Trim comes first): when pinned memory
// is short, a run of readbacks would otherwise try (and log) a HostAlloc
// every other call.
const DefaultSpareRetry = time.Second

// DefaultSpareWindow is how soon after the end of a readback that found
// one set the next one of its bucket must come for the bucket to get a
// second set (wantTwoSets).
const DefaultSpareWindow = 2 * time.Millisecond

// orderSpares starts the allocation of up to n spare blocks of bucket idx
// (size bytes) in the background, for a Lend about to wait for an eviction
// job that holds n blocks of it, when the bucket waited spareAfterWaits
// times. The spares stay within twice the most blocks calls held at once
// (one set in use, one being evicted) and keep the pool's allocated bytes
// within the cache's cap (so they are cached, not freed, when they come
// back). They are allocated off the call: a HostAlloc of megabytes takes
// milliseconds, which the call would pay where waiting costs
// microseconds; they go into the cache, for the calls after it.
func (p *Pool) orderSpares(idx, size, n int) {
	u := &p.use[idx]
	if u.waits.Load() < spareAfterWaits {
		return
	}
	for range n {
		if !p.reserveSpare(idx, size) {
			return
		}
		go p.allocSpare(idx, size)
	}
}

// reserveSpare counts one more spare block of bucket idx (size bytes) as
// being allocated, when the bounds orderSpares says allow it and no spare
// allocation of the bucket failed within the pool's spare retry delay;
// allocSpare then allocates it.
func (p *Pool) reserveSpare(idx, size int) bool {
	u := &p.use[idx]
	if f := u.failed.Load(); f != 0 && time.Now().UnixNano()-f < int64(p.spareRetry) {
		return false
	}
	for {
		pend := u.pending.Load()
		if u.live.Load()+pend >= 2*u.peak.Load() ||
			p.allocated.Load()+uint64(pend+1)*uint64(size) > p.cache.max {
			return false
		}
		if u.pending.CompareAndSwap(pend, pend+1) {
			p.spares.add()
			return true
		}
	}
}

// pinSpares allocates up to n spare blocks of bucket idx (size bytes) on
// the calling goroutine, within the bounds orderSpares says, and caches
// them: for a readback that wants a second set for the calls after it
// (SecondSet.End). A failure is logged and leaves nothing behind.
func (p *Pool) pinSpares(idx, size, n int) {
	for range n {
		if !p.reserveSpare(idx, size) {
			return
		}
		p.allocSpare(idx, size)
	}
}

// twoSets reports whether bucket idx holds two sets of k blocks (counting
// the blocks calls hold): a readback of k blocks that finds it so leaves
// its eviction to after the call, since the next one has the other set to
// use meanwhile.
func (p *Pool) twoSets(idx, k int) bool { return p.use[idx].live.Load() >= int32(2*k) }

// wantTwoSets reports, for a readback of bucket idx that would defer its
// eviction but finds no second set, whether the last such readback ended
// within the spare window (oneSetEnded). Such a readback evicts in its
// copy out, as it must when the next call would wait for its staging; when
// wantTwoSets says so, it also pins the second set before it returns
// (pinSpares), so a run of readbacks pays the pinning once, on its second
// call, and a readback now and then never pins a second set. (Pinning it
// in the background stalled the driver calls of the readbacks beside it:
// on the reference H100 host 1-2 ms for 1.5 MiB, which the bench's ten
// calls of a size met.) The window runs from the end of the last readback,
// not its start: a first call that faults in its destination's pages takes
// milliseconds.
func (p *Pool) wantTwoSets(idx int) bool {
	last := p.use[idx].lastOne.Load()
	return last != 0 && time.Now().UnixNano()-last <= int64(p.spareWindow)
}

// oneSetEnded notes the end of a readback of bucket idx that evicted in
// its copy out for want of a second set, and pinned none (wantTwoSets).
func (p *Pool) oneSetEnded(idx int) { p.use[idx].lastOne.Store(time.Now().UnixNano()) }

// SecondSet is what a readback that could leave its eviction to after the
// call, but found no second set of its staging, does once it succeeded
// (End): pin the second set, or note its end. The zero value does nothing.
type SecondSet struct {
	pool    *Pool
	size, k int  // the bucket's size and the readback's blocks of it
	pin     bool // the last such readback ended within the spare window (wantTwoSets)
}

// DeferEviction reports whether a readback holding k blocks of bucket size
// may leave the eviction of its staging to after the call: when the bucket
// holds a second set, which the next readback uses meanwhile. When not,
// the readback evicts in its copy out and, once it succeeded, calls the
// returned SecondSet's End.
func (p *Pool) DeferEviction(size, k int) (bool, SecondSet) {
	idx := bitsIndex(size)
	if p.twoSets(idx, k) {
		return true, SecondSet{}
	}
	return false, SecondSet{pool: p, size: size, k: k, pin: p.wantTwoSets(idx)}
}

// End pins the second set before the readback returns, or notes the
// readback's end for the next one's DeferEviction.
func (s SecondSet) End() {
	switch {
	case s.pool == nil || s.size == 0:
	case s.pin:
		s.pool.pinSpares(bitsIndex(s.size), s.size, s.k)
	default:
		s.pool.oneSetEnded(bitsIndex(s.size))
	}
}

// allocSpare allocates one spare block of bucket idx (size bytes) and
// caches it. A failure is logged, leaves nothing behind (spares are an
// optimization) and holds off the bucket's next spare for the spare retry
// delay.
func (p *Pool) allocSpare(idx, size int) {
	defer p.spares.done()
	u := &p.use[idx]
	defer u.pending.Add(-1)
	buf, err := p.drv.HostAlloc(uint64(size))
	if err != nil || len(buf) != size {
		if len(buf) > 0 {
			_ = p.freeBuf(buf, "a spare HostAlloc returned the wrong length")
		}
		u.failed.Store(time.Now().UnixNano())
		p.log.Warn("pinned host pool: allocating a spare staging block failed; no other is tried for a while",
			"len", size, "got", len(buf), "err", err, "retry_after", p.spareRetry)
		return
	}
	u.failed.Store(0)
	if err := p.allocated.Add(uint64(size)); err != nil {
		_ = p.freeBuf(buf, "after the allocated-bytes count overflowed")
		return
	}
	u.live.Add(1)
	p.keep(Block{buf: buf})
}
