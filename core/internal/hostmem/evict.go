package hostmem

import (
	"math/bits"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/vyre-go/vyrecuda/internal/ntcopy"
)

// A readback that evicts its staging from the caches does so after its
// call returned: the copy out reads the staging into the caller's memory,
// the call hands the staging blocks to an evictJob (EvictLater) and
// returns, and the pool's Helpers evict the lines the DMA wrote while the
// caller goes on. Core runs the job on its copy helpers as a background
// job: they take its tasks only when no call's copying has one for them,
// so a next readback's own copy out comes first and the eviction fills
// the time its first DMA is in flight. On the reference H100 host evicting
// 4 MiB inside the unpack cost a 1024 x 4 KiB readback about 40 us of its
// 90 us unpack. Which readbacks evict after the call is core's choice
// (DeferEviction tells it whether the bucket has a second set).
//
// How it is ordered:
//   - The job holds the blocks from the moment the call lets go of them
//     until the last line is evicted; only then does it put them back into
//     the pool (evictJob.done, run by the goroutine that evicted last,
//     before the job's Wait returns). A block under eviction is in no
//     cache, so nothing can free it (Trim and Close free cached blocks
//     only) and no other call can take it.
//   - The pool lists its jobs (Pool.evicting). A Lend that misses its
//     bucket while a job holds a block of that bucket helps that job and
//     waits for it, then looks again: a sporadic readback finds its staging
//     back, evicted, instead of allocating another block (a HostAlloc of
//     megabytes takes milliseconds). Once Lends of a bucket have waited
//     twice, readbacks of that size follow one another, and the bucket
//     gets a second set, allocated in the background (Pool.orderSpares;
//     readbacks that ask DeferEviction pin theirs on the call).
//   - Trim, Close and CachedBytes wait for every job first
//     (settleEvictions), so Trim and Close free the blocks and the
//     statistics count them. Core's Close returns only after every call
//     has, so no job can start after its pool's Close settled.
//
// Eviction never changes a byte (ntcopy.Evict), so a job evicting lines a
// later user of the block writes would be harmless; the ordering above is
// what keeps the memory mapped and the next DMA's lines out of the caches.

// Helpers runs eviction jobs off the calls that start them; core runs
// them on its copy helpers.
type Helpers interface {
	// NewJob returns a job of n tasks that runs nothing until Start:
	// task(i) for each i in [0, n), claimed one at a time, then finish,
	// once, on the goroutine that returned the last task. Helpers linger
	// for linger after the job (negative: they park at once).
	NewJob(n int, task func(i int), finish func(), linger time.Duration) Job
}

// Job is one job of Helpers.
type Job interface {
	// Start hands the job to the helpers, waking up to workers of them.
	Start(workers int)
	// Wait runs tasks no helper has claimed yet and returns once finish
	// has returned.
	Wait()
}

// evictTaskBytes is what one task of an evictJob evicts: about 1.6 us of
// CLFLUSHOPT on one core of the reference H100 host (clean lines went at
// about 10 GB/s per thread). Helpers run such tasks between the tasks of
// calls' own copying, so a short task keeps a helper's answer to a
// landed chunk prompt.
const evictTaskBytes = 16 << 10

// InlineEvictBlocks is how many blocks and regions an eviction job holds
// without allocating: a staged readback's blocks (at most 16 up to the
// largest size core evicts after the call) and a per-copy or packed one's
// single block. Core defers the eviction of readbacks of at most this many
// blocks only.
const InlineEvictBlocks = 16

// evictJob evicts one readback's staging regions in tasks on the pool's
// Helpers and then gives the blocks holding them back to their pool.
type evictJob struct {
	job     Job
	pool    *Pool
	hook    func(part []byte) // the pool's EvictHook
	regions [][]byte          // the bytes the device wrote, inside blocks
	starts  []int             // the first task of each region, then the task count
	blocks  []Block           // held until the eviction ends
	buckets uint64            // bit i: a block of pool bucket i is held
	held    [64]uint16        // blocks of each bucket held; fixed once listed
	// Inline storage for the usual few blocks: a staged readback of 4 MiB
	// spent 4-5 us on the reference host allocating its per-task slices.
	regionsA [InlineEvictBlocks][]byte
	startsA  [InlineEvictBlocks + 1]int
	blocksA  [InlineEvictBlocks]Block
}

// EvictLater evicts regions (inside blocks, which the caller gives up, as
// lent; the job keeps copies of both slices' elements) on the pool's
// Helpers and returns at once; the blocks go back to p once every region
// is evicted. Up to workers-1 helpers are woken (at least one), and linger
// after it as Helpers.NewJob says. Nothing is evicted when the processor
// cannot evict or the pool has no Helpers: the blocks go back at once.
func (p *Pool) EvictLater(blocks []Block, regions [][]byte, workers int, linger time.Duration) {
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
	if total == 0 || p.helpers == nil || !ntcopy.EvictAvailable() && p.evictHook == nil {
		for _, b := range blocks {
			p.keep(b)
		}
		return
	}
	ej := &evictJob{pool: p, hook: p.evictHook}
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
	ej.job = p.helpers.NewJob(n, ej.evict, ej.done, linger)
	p.evictMu.Lock()
	p.evicting = append(p.evicting, ej)
	p.evictMu.Unlock()
	// A background job: the helpers evict when no call's copying needs
	// them, such as while the next call's first DMA is in flight.
	ej.job.Start(min(max(workers-1, 1), n))
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
	if ej.hook != nil {
		ej.hook(part)
	}
	ntcopy.Evict(part)
}

// done runs once, after the last task: it puts the blocks back into the
// pool and then takes the job off the pool's list, so a Lend that found
// the job listed finds the blocks cached once the job's Wait returns.
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
	clear(ej.blocks) // no Lend looks at them once the job is off the list
	ej.blocks = nil
}

// evictions is the Pool's list of eviction jobs in progress.
type evictions struct {
	evictMu  sync.Mutex
	evicting []*evictJob // guarded by evictMu
}

// evictionOf returns a job holding a block of bucket idx, and how many
// blocks of that bucket it holds, or nil.
func (p *Pool) evictionOf(idx int) (*evictJob, int) {
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
func (p *Pool) settleEvictions() {
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
		ej.job.Wait()
	}
}
