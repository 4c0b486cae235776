package core

import (
	"fmt"
	"log/slog"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/vyre-go/vyrecuda/accounting"
)

// pinnedBlock is one page-locked host buffer handed out by a hostPool. buf's
// length is the whole bucket (a power of two) and its backing array is the
// memory HostAlloc returned. The zero value is "no block".
type pinnedBlock struct {
	buf []byte
}

// hostPool caches freed pinned host buffers in power-of-two buckets, so
// staging for uploads and readbacks does not pay for HostAlloc (page-locking
// is far slower than a device allocation) on every call. It has the same
// bounds as devicePool: a byte cap over all buckets, bounded slots per bucket,
// and puts cached only in buckets a get has missed on.
type hostPool struct {
	drv    Driver
	log    *slog.Logger
	cache  bucketCache[[]byte]
	notify CacheNotifier // the driver's, or nil: told what enters and leaves the cache

	// allocated counts the bytes obtained from HostAlloc and not yet freed;
	// exact, repaired to zero with a logged error if a release would underflow.
	allocated accounting.Counter

	// unfreed holds blocks HostFree failed on that found no room in the
	// cache: still allocated and counted, freed again by the next trim or
	// close (retryUnfreed).
	unfreed unfreedList[[]byte]

	// evictions holds the blocks of readbacks whose staging is still being
	// evicted from the caches (evictjob.go).
	evictions

	// use tracks each bucket's blocks for the spare rule (orderSpares).
	use [64]bucketUse
	// spares counts spare allocations running in the background; trim,
	// close and cachedBytes wait for them.
	spares inflight
}

// inflight counts background work that others wait for; unlike a
// sync.WaitGroup, work may start while someone waits. Its cond's L must be
// &mu (newHostPool sets it).
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
	waits atomic.Uint32 // gets that waited for an eviction to give a block back
	out   atomic.Int32  // blocks calls hold (got and not yet given back)
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

// spareAfterWaits is how many times gets of one bucket wait for an
// eviction before the bucket gets spare blocks. Readbacks that evict their
// staging after returning (evictjob.go) and follow one another leave the
// next call waiting for the last one's staging: on the reference H100
// host a 1 MiB DMA into staging just evicted took 26-27 us and into
// staging still cached 47-58 us, while evicting 1 MiB took 13 us on 8
// threads. A bucket that waited twice has readbacks back to back: it gets
// a second set of blocks, evicted while the other set is in use, and keeps
// it (the cache holds it) until Trim or Close. Sporadic readbacks never
// wait, so never cost a second set.
const spareAfterWaits = 2

// orderSpares starts the allocation of up to n spare blocks of bucket idx
// (size bytes) in the background, for a get about to wait for an eviction
// job that holds n blocks of it, when the bucket waited spareAfterWaits
// times. The spares stay within twice the most blocks calls held at once
// (one set in use, one being evicted) and keep the pool's allocated bytes
// within the cache's cap (so they are cached, not freed, when they come
// back). They are allocated off the call: a HostAlloc of megabytes takes
// milliseconds, which the call would pay where waiting costs
// microseconds; they go into the cache, for the calls after it.
func (p *hostPool) orderSpares(idx, size, n int) {
	u := &p.use[idx]
	if u.waits.Load() < spareAfterWaits {
		return
	}
	p.allocSpares(idx, size, n)
}

// allocSpares starts the background allocation of up to n spare blocks of
// bucket idx (size bytes), within the bounds orderSpares says.
func (p *hostPool) allocSpares(idx, size, n int) {
	for range n {
		if !p.reserveSpare(idx, size) {
			return
		}
		go p.allocSpare(idx, size)
	}
}

// spareRetryAfter is how long after a spare allocation of a bucket failed
// no other is tried (unless a Trim comes first): when pinned memory is
// short, a run of readbacks would otherwise try (and log) a HostAlloc every
// other call. A variable so tests can shorten it.
var spareRetryAfter = time.Second

// reserveSpare counts one more spare block of bucket idx (size bytes) as
// being allocated, when the bounds orderSpares says allow it and no spare
// allocation of the bucket failed within spareRetryAfter; allocSpare then
// allocates it.
func (p *hostPool) reserveSpare(idx, size int) bool {
	u := &p.use[idx]
	if f := u.failed.Load(); f != 0 && time.Now().UnixNano()-f < int64(spareRetryAfter) {
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
// (staged.go, packedread.go). A failure is logged and leaves nothing
// behind.
func (p *hostPool) pinSpares(idx, size, n int) {
	for range n {
		if !p.reserveSpare(idx, size) {
			return
		}
		p.allocSpare(idx, size)
	}
}

// spareWindow is how soon after the end of a readback that found one set
// the next one of its bucket must come for the bucket to get a second set
// (wantTwoSets); a variable so tests on slow machines can widen it.
var spareWindow = 2 * time.Millisecond

// twoSets reports whether bucket idx holds two sets of k blocks (counting
// the blocks calls hold): a staged readback of k blocks that finds it so
// leaves its eviction to after the call, since the next one has the other
// set to use meanwhile (staged.go).
func (p *hostPool) twoSets(idx, k int) bool { return p.use[idx].live.Load() >= int32(2*k) }

// wantTwoSets reports, for a staged readback (or a readback in parts,
// packedread.go) of bucket idx that would defer its eviction but finds no
// second set, whether the last such readback ended within spareWindow
// (oneSetEnded). Such a readback evicts in its copy out, as it must when
// the next call would wait for its staging; when wantTwoSets says so, it
// also pins the second set before it returns (pinSpares), so a run of
// readbacks pays the pinning once, on its second call, and a readback now
// and then never pins a second set. (Pinning it in the background stalled
// the driver calls of the readbacks beside it: on the reference H100 host
// 1-2 ms for 1.5 MiB, which the bench's ten calls of a size met.) The
// window runs from the end of the last readback, not its start: a first
// call that faults in its destination's pages takes milliseconds.
func (p *hostPool) wantTwoSets(idx int) bool {
	last := p.use[idx].lastOne.Load()
	return last != 0 && time.Now().UnixNano()-last <= int64(spareWindow)
}

// oneSetEnded notes the end of a readback of bucket idx that evicted in
// its copy out for want of a second set, and pinned none (wantTwoSets).
func (p *hostPool) oneSetEnded(idx int) { p.use[idx].lastOne.Store(time.Now().UnixNano()) }

// secondSet is what a readback that could leave its eviction to after the
// call, but found no second set of its staging, does once it succeeded
// (end): pin the second set, or note its end.
type secondSet struct {
	size, k int  // the bucket's size and the readback's blocks of it; size 0: nothing
	pin     bool // the last such readback ended within spareWindow (wantTwoSets)
}

// deferEviction reports whether a readback holding k blocks of bucket size
// may leave the eviction of its staging to after the call: when the bucket
// holds a second set (twoSets), which the next readback uses meanwhile.
// When not, the readback evicts in its copy out and, once it succeeded,
// calls the returned secondSet's end.
func (p *hostPool) deferEviction(size, k int) (bool, secondSet) {
	idx := bitsIndex(size)
	if p.twoSets(idx, k) {
		return true, secondSet{}
	}
	return false, secondSet{size: size, k: k, pin: p.wantTwoSets(idx)}
}

// end pins the second set before the readback returns (pinSpares), or
// notes the readback's end (oneSetEnded) for the next one's wantTwoSets.
func (s secondSet) end(p *hostPool) {
	switch {
	case s.size == 0:
	case s.pin:
		p.pinSpares(bitsIndex(s.size), s.size, s.k)
	default:
		p.oneSetEnded(bitsIndex(s.size))
	}
}

// allocSpare allocates one spare block of bucket idx (size bytes) and
// caches it. A failure is logged, leaves nothing behind (spares are an
// optimization) and holds off the bucket's next spare for spareRetryAfter.
func (p *hostPool) allocSpare(idx, size int) {
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
			"len", size, "got", len(buf), "err", err, "retry_after", spareRetryAfter)
		return
	}
	u.failed.Store(0)
	if err := p.allocated.Add(uint64(size)); err != nil {
		_ = p.freeBuf(buf, "after the allocated-bytes count overflowed")
		return
	}
	u.live.Add(1)
	p.keep(pinnedBlock{buf: buf})
}

// newHostPool returns an empty pool over drv that caches at most
// maxCachedBytes of freed pinned buffers. A nil log discards repair reports.
func newHostPool(drv Driver, maxCachedBytes uint64, log *slog.Logger) *hostPool {
	log = orDiscard(log)
	p := &hostPool{drv: drv, log: log, notify: cacheNotifier(drv),
		cache: bucketCache[[]byte]{name: "pinned host pool", log: log, max: maxCachedBytes}}
	p.spares.cond.L = &p.spares.mu
	return p
}

// get returns a pinned block of at least n bytes: a cached one from n's
// bucket when there is one, otherwise a fresh HostAlloc of the whole bucket.
// Its contents are whatever the previous user left there. n <= 0, a closed
// pool, a driver failure and an empty or wrongly sized buffer returned with
// success are errors; none of them changes the pool's accounting or leaks.
func (p *hostPool) get(op string, n int) (pinnedBlock, error) {
	size, idx, err := bucketFor(op, "pinned host allocation", n)
	if err != nil {
		return pinnedBlock{}, err
	}
	buf, state := p.cache.pop(idx, size)
	for state == cacheMiss {
		ej, held := p.evictionOf(idx)
		if ej == nil {
			break
		}
		// A block of this size is being evicted: wait for it (helping),
		// then look again, unless another call took it first. A bucket
		// that keeps waiting gets spare blocks meanwhile.
		p.orderSpares(idx, size, held)
		ej.await()
		p.use[idx].waits.Add(1)
		buf, state = p.cache.pop(idx, size)
	}
	switch state {
	case cacheHit:
		if p.notify != nil {
			p.notify.HostReused(buf)
		}
		p.use[idx].checkOut()
		return pinnedBlock{buf: buf}, nil
	case cacheClosed:
		return pinnedBlock{}, closedPoolError(op, "pinned host pool")
	}

	buf, err = p.drv.HostAlloc(uint64(size))
	if err != nil {
		e := driverError(op, "HostAlloc", err)
		e.Detail = fmt.Sprintf("HostAlloc of a %d-byte bucket for a %d-byte request failed", size, n)
		return pinnedBlock{}, e
	}
	if len(buf) == 0 {
		return pinnedBlock{}, nullSuccess(op, "HostAlloc")
	}
	if len(buf) != size {
		// The driver handed back memory we did not ask for: free it rather
		// than guess how much of it is usable.
		_ = p.freeBuf(buf, "HostAlloc returned the wrong length")
		e := newError(op, KindDriver,
			fmt.Sprintf("HostAlloc of %d bytes returned %d bytes", size, len(buf)),
			"the driver misbehaved; report it with the driver version, and retry the call")
		return pinnedBlock{}, e
	}
	if err := p.allocated.Add(uint64(size)); err != nil {
		_ = p.freeBuf(buf, "after the allocated-bytes count overflowed")
		e := newError(op, KindBudget,
			fmt.Sprintf("pinned host pool live bytes cannot grow by %d", size),
			"free pinned staging before requesting more")
		e.Err = err
		return pinnedBlock{}, e
	}
	p.use[idx].live.Add(1)
	p.use[idx].checkOut()
	return pinnedBlock{buf: buf}, nil
}

// put gives back b, which a get handed out. It is cached when its bucket
// has a free slot and the byte cap allows; otherwise it is freed with
// HostFree, whose failure is logged. The caller must not touch b.buf
// afterwards. The zero block is ignored; a block whose length is not a
// bucket this pool handed out is freed.
func (p *hostPool) put(b pinnedBlock) {
	p.checkIn(b)
	p.keep(b)
}

// checkIn counts b as no longer held by a call.
func (p *hostPool) checkIn(b pinnedBlock) {
	if size := len(b.buf); size > 0 && size&(size-1) == 0 {
		p.use[bits.TrailingZeros(uint(size))].out.Add(-1)
	}
}

// keep caches or frees b, as put says, without counting it as given back
// by a call (an eviction job's blocks were counted when the job took them).
func (p *hostPool) keep(b pinnedBlock) {
	size := len(b.buf)
	if size == 0 {
		return
	}
	if size&(size-1) != 0 {
		p.log.Error("pinned host pool: put of a block whose length is not a power of two; freeing it",
			"len", size)
		p.release(b.buf, "its length is not a bucket")
		return
	}
	// Told before the push: once pushed, another goroutine may pop it.
	if p.notify != nil {
		p.notify.HostCached(b.buf)
	}
	if !p.cache.push(bits.TrailingZeros(uint(size)), size, b.buf) {
		p.release(b.buf, "its bucket is full, unknown or over the byte cap")
	}
}

// release frees buf for real and removes it from the allocated count; a
// block HostFree fails on stays counted, kept for a later retry.
func (p *hostPool) release(buf []byte, why string) {
	if p.freeBuf(buf, why) != nil {
		p.keepUnfreed(buf)
		return
	}
	p.freed(buf)
}

// freed accounts for buf, freed by HostFree.
func (p *hostPool) freed(buf []byte) {
	subOrRepair(&p.allocated, uint64(len(buf)), p.log, "pinned host pool allocated bytes")
	if size := len(buf); size&(size-1) == 0 {
		p.use[bits.TrailingZeros(uint(size))].live.Add(-1)
	}
}

// keepUnfreed keeps a block HostFree failed on, still counted in allocated.
func (p *hostPool) keepUnfreed(buf []byte) { p.unfreed.keep(buf) }

// retryUnfreed frees the blocks an earlier HostFree failed on and returns
// the first failure; blocks that fail again stay kept.
func (p *hostPool) retryUnfreed(op string) error {
	return p.unfreed.retry(func(buf []byte) error {
		if err := p.freeBuf(buf, "retrying a failed free"); err != nil {
			return driverError(op, "HostFree", err)
		}
		p.freed(buf)
		return nil
	})
}

// unfreedBlocks returns how many blocks, and bytes, HostFree failed on and
// are kept for a retry.
func (p *hostPool) unfreedBlocks() (n int, bytes uint64) {
	return p.unfreed.count(func(buf []byte) uint64 { return uint64(len(buf)) })
}

// freeBuf calls HostFree on buf's first byte and logs a failure.
func (p *hostPool) freeBuf(buf []byte, why string) error {
	if err := p.drv.HostFree(unsafe.Pointer(&buf[0])); err != nil {
		p.log.Error("pinned host pool: HostFree failed", "len", len(buf), "why", why, "err", err)
		return err
	}
	return nil
}

// cachedBytes returns the bytes held in the free lists, once every block
// being evicted is back in them and every spare being allocated is in.
func (p *hostPool) cachedBytes() uint64 {
	p.settleEvictions()
	p.spares.wait()
	return p.cache.cached.Load()
}

// allocatedBytes returns the bytes obtained from HostAlloc and not yet freed.
func (p *hostPool) allocatedBytes() uint64 { return p.allocated.Load() }

// close frees every cached block (and retries those an earlier HostFree
// failed on) and refuses further gets; later puts free immediately. A block
// HostFree fails on stays allocated and counted, kept for the next close.
// It returns the first HostFree failure (every block is still attempted).
// Calling it again retries only the kept blocks.
func (p *hostPool) close() error {
	const op = "close pinned host pool"
	p.settleEvictions()
	p.spares.wait()
	first := p.retryUnfreed(op)
	for _, e := range p.cache.closeCache() {
		if err := p.freeBuf(e.v, "closing the pool"); err != nil {
			p.keepUnfreed(e.v)
			if first == nil {
				first = driverError(op, "HostFree", err)
			}
			continue
		}
		p.freed(e.v)
	}
	return first
}
