package core

import (
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/vyre-go/vyrecuda/core/internal/copyjob"
	"github.com/vyre-go/vyrecuda/internal/ntcopy"
)

// A readback that evicts its staging from the caches (StagingCache) does so
// after its call returned: the copy out reads the staging into the
// caller's memory, the call hands the staging blocks to an evictJob and
// returns, and the copy helpers evict the lines the DMA wrote while the
// caller goes on. The job is a background one (copyjob.Background):
// helpers take its tasks only when no call's copying has one for them, so
// a next readback's own copy out comes first and the eviction fills the
// time its first DMA is in flight. On the reference H100 host evicting 4
// MiB inside the unpack cost a 1024 x 4 KiB readback about 40 us of its 90
// us unpack. Staged single readbacks of up to 2 MiB and readbacks in parts
// do so only once their bucket holds a second set (hostPool.deferEviction);
// larger staged ones evict in their copy out (transfer.EvictLaterMaxBytes
// says why).
//
// How it is ordered:
//   - The job holds the blocks from the moment the call lets go of them
//     until the last line is evicted; only then does it put them back into
//     the pool (evictJob.done, run by the goroutine that evicted last,
//     before the job's done channel closes). A block under eviction is in
//     no cache, so nothing can free it (Trim and Close free cached blocks
//     only) and no other call can take it.
//   - The pool lists its jobs (hostPool.evicting). A get that misses its
//     bucket while a job holds a block of that bucket helps that job and
//     waits for it, then looks again: a sporadic readback finds its staging
//     back, evicted, instead of allocating another block (a HostAlloc of
//     megabytes takes milliseconds). Once gets of a bucket have waited
//     twice, readbacks of that size follow one another, and the bucket
//     gets a second set, allocated in the background (hostPool.orderSpares;
//     staged readbacks and readbacks in parts pin theirs on the call,
//     hostPool.deferEviction).
//   - trim, close and cachedBytes wait for every job first (settleEvictions),
//     so Trim and Close free the blocks and the statistics count them.
//     Backend.Close returns only after every call has, so no job can start
//     after its pool's close settled.
//
// Eviction never changes a byte (ntcopy.Evict), so a job evicting lines a
// later user of the block writes would be harmless; the ordering above is
// what keeps the memory mapped and the next DMA's lines out of the caches.

// evictTaskBytes is what one task of an evictJob evicts: about 1.6 us of
// CLFLUSHOPT on one core of the reference H100 host (clean lines went at
// about 10 GB/s per thread). Helpers run such tasks between the tasks of
// calls' own copying, so a short task keeps a helper's answer to a
// landed chunk prompt.
const evictTaskBytes = 16 << 10

// evictHook, when set (tests only), is called with each part of a staging
// region just before a job evicts it.
var evictHook func(part []byte)

// evictJob evicts one readback's staging regions in tasks on the copy
// helpers and then gives the blocks holding them back to their pool.
type evictJob struct {
	job     copyjob.Job
	pool    *hostPool
	regions [][]byte      // the bytes the device wrote, inside blocks
	starts  []int         // the first task of each region, then the task count
	blocks  []pinnedBlock // held until the eviction ends
	buckets uint64        // bit i: a block of pool bucket i is held
	held    [64]uint16    // blocks of each bucket held; fixed once listed
	settled atomic.Bool   // the blocks are back in the pool
	// Inline storage for the usual few blocks: a staged readback of 4 MiB
	// spent 4-5 us on the reference host allocating its per-task slices.
	regionsA [evictInline][]byte
	startsA  [evictInline + 1]int
	blocksA  [evictInline]pinnedBlock
}

// evictInline is how many blocks and regions an evictJob holds without
// allocating: a staged readback's blocks (at most 16 up to the largest
// size EvictBySize evicts) and a per-copy or packed one's single block.
const evictInline = 16

// evictLater evicts regions (inside blocks, which the caller gives up; the
// job keeps copies of both slices' elements) on the copy helpers and
// returns at once; the blocks go back to p once every region is evicted.
// The job is a background one (copyjob.Background): helpers run its
// tasks when no call's copying needs them, waking up to w-1 of them if
// none is polling, and then linger as copyjob.RunTasks says. Nothing is evicted
// when ntcopy cannot evict: the blocks go back at once.
func (p *hostPool) evictLater(blocks []pinnedBlock, regions [][]byte, w int, linger time.Duration) {
	if len(blocks) == 0 {
		return
	}
	for _, b := range blocks {
		p.checkIn(b) // the call is done with them
	}
	total := 0
	for _, r := range regions {
		total += len(r)
	}
	if total == 0 || !ntcopy.EvictAvailable() && evictHook == nil {
		for _, b := range blocks {
			p.keep(b)
		}
		return
	}
	ej := &evictJob{pool: p}
	ej.blocks, ej.regions, ej.starts = ej.blocksA[:0], ej.regionsA[:0], append(ej.startsA[:0], 0)
	// Blocks the device did not write (a packed readback's table) go back
	// at once: the job holds only what it evicts, so a call taking such a
	// block does not wait for it.
	for _, b := range blocks {
		if overlapsAny(b.buf, regions) {
			ej.blocks = append(ej.blocks, b)
			idx := bits.TrailingZeros(uint(len(b.buf)))
			ej.buckets |= 1 << idx
			ej.held[idx]++
		} else {
			p.keep(b)
		}
	}
	n := 0
	for _, r := range regions {
		if len(r) > 0 {
			n += (len(r) + evictTaskBytes - 1) / evictTaskBytes
			ej.regions, ej.starts = append(ej.regions, r), append(ej.starts, n)
		}
	}
	ej.job.Init(n, linger, false, ej.evict, ej.done)
	p.evictMu.Lock()
	p.evicting = append(p.evicting, ej)
	p.evictMu.Unlock()
	// A background job: the helpers evict when no call's copying needs
	// them, such as while the next call's first DMA is in flight.
	copyjob.Background(&ej.job, min(min(max(w-1, 1), copyjob.MaxWorkers), n))
}

// overlapsAny reports whether a shares a byte with one of rs.
func overlapsAny(a []byte, rs [][]byte) bool {
	for _, r := range rs {
		if overlaps(a, r) {
			return true
		}
	}
	return false
}

// overlaps reports whether a and b share a byte.
func overlaps(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	a0, b0 := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return a0 < b0+uintptr(len(b)) && b0 < a0+uintptr(len(a))
}

// evict evicts task i's part: evictTaskBytes of one region.
func (ej *evictJob) evict(i int) {
	r := 0
	for ej.starts[r+1] <= i {
		r++
	}
	lo := (i - ej.starts[r]) * evictTaskBytes
	part := ej.regions[r][lo:min(lo+evictTaskBytes, len(ej.regions[r]))]
	if h := evictHook; h != nil {
		h(part)
	}
	ntcopy.Evict(part)
}

// done runs once, after the last task: it puts the blocks back into the pool and then
// takes the job off the pool's list, so a get that found the job listed
// finds the blocks cached once the job is settled.
func (ej *evictJob) done() {
	p := ej.pool
	for _, b := range ej.blocks {
		p.keep(b)
	}
	p.evictMu.Lock()
	if i := slices.Index(p.evicting, ej); i >= 0 {
		p.evicting = slices.Delete(p.evicting, i, i+1)
	}
	p.evictMu.Unlock()
	clear(ej.blocks) // no get looks at them once the job is off the list
	ej.blocks = nil
	ej.settled.Store(true)
}

// await helps with ej's remaining tasks and returns once its blocks are
// back in the pool: it polls for up to copyjob.WaitSpin, then blocks.
func (ej *evictJob) await() {
	ej.job.Work()
	var sp spinner
	var until time.Time
	for !ej.settled.Load() {
		if now, ok := sp.pause(); ok {
			if until.IsZero() {
				until = now.Add(copyjob.WaitSpin)
			} else if now.After(until) {
				<-ej.job.Done()
				return
			}
		}
	}
}

// evictions is the hostPool's list of eviction jobs in progress.
type evictions struct {
	evictMu  sync.Mutex
	evicting []*evictJob // guarded by evictMu
}

// evictionOf returns a job holding a block of bucket idx, and how many
// blocks of that bucket it holds, or nil.
func (p *hostPool) evictionOf(idx int) (*evictJob, int) {
	p.evictMu.Lock()
	defer p.evictMu.Unlock()
	for _, e := range p.evicting {
		if e.buckets&(1<<idx) != 0 {
			return e, int(e.held[idx])
		}
	}
	return nil, 0
}

// settleEvictions waits for every eviction job of p, so that every block
// they held is back in the pool.
func (p *hostPool) settleEvictions() {
	for {
		p.evictMu.Lock()
		var ej *evictJob
		if len(p.evicting) > 0 {
			ej = p.evicting[0]
		}
		p.evictMu.Unlock()
		if ej == nil {
			return
		}
		ej.await()
	}
}
