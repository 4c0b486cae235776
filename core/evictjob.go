package core

import (
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/vyre-go/vyrecuda/internal/ntcopy"
)

// A readback that evicts its staging from the caches (StagingCache) does so
// after its call returned: the unpack copies the caller's bytes out, the
// call hands the staging blocks to an evictJob and returns, and the copy
// helpers evict the lines the DMA wrote while the caller goes on. On the
// reference H100 host evicting 4 MiB inside the unpack cost a 1024 x 4 KiB
// readback about 40 us of its 90 us unpack.
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
//     waits for it, then looks again: the next readback of the same size
//     finds its staging back, evicted, instead of allocating another block
//     (a HostAlloc of megabytes takes milliseconds).
//   - trim, close and cachedBytes wait for every job first (settleEvictions),
//     so Trim and Close free the blocks and the statistics count them.
//     Backend.Close returns only after every call has, so no job can start
//     after its pool's close settled.
//
// Eviction never changes a byte (ntcopy.Evict), so a job evicting lines a
// later user of the block writes would be harmless; the ordering above is
// what keeps the memory mapped and the next DMA's lines out of the caches.

// evictTaskBytes is the least a task of an evictJob evicts: a few
// microseconds of CLFLUSHOPT on the reference host (4 MiB took about 40 us
// on 16 goroutines).
const evictTaskBytes = 64 << 10

// evictHook, when set (tests only), is called with each part of a staging
// region just before a job evicts it.
var evictHook func(part []byte)

// evictJob evicts one readback's staging region in tasks on the copy
// helpers and then gives the blocks holding it back to their pool.
type evictJob struct {
	job     taskJob
	pool    *hostPool
	region  []byte        // the bytes the device wrote, inside blocks
	task    int           // bytes per task, a multiple of ntcopy.LineBytes
	blocks  []pinnedBlock // held until the eviction ends
	buckets uint64        // bit i: a block of pool bucket i is held
	settled atomic.Bool   // the blocks are back in the pool
}

// evictLater evicts region (inside blocks, which the caller gives up) on up
// to w-1 goroutines other than the caller's (the helpers the call's own
// copying used, so the caller keeps a processor for its next call) and
// returns at once; the blocks
// go back to p once region is evicted. Helpers linger after it as runTasks
// says. Nothing is evicted when ntcopy cannot evict: the blocks go back at
// once.
func (p *hostPool) evictLater(blocks []pinnedBlock, region []byte, w int, linger time.Duration) {
	if len(blocks) == 0 {
		return
	}
	if len(region) == 0 || !ntcopy.EvictAvailable() && evictHook == nil {
		for _, b := range blocks {
			p.put(b)
		}
		return
	}
	// Blocks the device did not write (a packed readback's table) go back
	// at once: the job holds only what it evicts, so a call taking such a
	// block does not wait for it.
	kept := blocks[:0]
	for _, b := range blocks {
		if overlaps(b.buf, region) {
			kept = append(kept, b)
		} else {
			p.put(b)
		}
	}
	blocks = kept
	w = min(max(w-1, 1), maxCopyWorkers)
	task := max(alignUp((len(region)+w*tasksPerWorker-1)/(w*tasksPerWorker), ntcopy.LineBytes), evictTaskBytes)
	n := (len(region) + task - 1) / task
	ej := &evictJob{pool: p, region: region, task: task, blocks: blocks}
	for _, b := range blocks {
		ej.buckets |= 1 << bits.TrailingZeros(uint(len(b.buf)))
	}
	ej.job = taskJob{f: ej.evict, n: int64(n), linger: linger, done: make(chan struct{}), finish: ej.done}
	ej.job.left.Store(int64(n))
	p.evictMu.Lock()
	p.evicting = append(p.evicting, ej)
	p.evictMu.Unlock()
	helpers := min(w, n)
	if copyHelpers.share(&ej.job, helpers) {
		return // ej.done unshares it
	}
	// Another job is being shared (a concurrent call's copying): goroutines
	// of its own, as startJob does.
	for range helpers {
		go ej.job.workAll()
	}
}

// overlaps reports whether a and b share a byte.
func overlaps(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	a0, b0 := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return a0 < b0+uintptr(len(b)) && b0 < a0+uintptr(len(a))
}

// evict evicts task i's part of the region.
func (ej *evictJob) evict(i int) {
	lo := i * ej.task
	part := ej.region[lo:min(lo+ej.task, len(ej.region))]
	if h := evictHook; h != nil {
		h(part)
	}
	ntcopy.Evict(part)
}

// done runs once, after the last task: it stops sharing the job with the
// helpers (when it was shared), puts the blocks back into the pool and then
// takes the job off the pool's list, so a get that found the job listed
// finds the blocks cached once the job is settled.
func (ej *evictJob) done() {
	copyHelpers.cur.CompareAndSwap(&ej.job, nil)
	p := ej.pool
	for _, b := range ej.blocks {
		p.put(b)
	}
	ej.blocks = nil
	p.evictMu.Lock()
	if i := slices.Index(p.evicting, ej); i >= 0 {
		p.evicting = slices.Delete(p.evicting, i, i+1)
	}
	p.evictMu.Unlock()
	ej.settled.Store(true)
}

// await helps with ej's remaining tasks and returns once its blocks are
// back in the pool: it polls for up to waitSpin, then blocks.
func (ej *evictJob) await() {
	ej.job.work()
	var sp spinner
	var until time.Time
	for !ej.settled.Load() {
		if now, ok := sp.pause(); ok {
			if until.IsZero() {
				until = now.Add(waitSpin)
			} else if now.After(until) {
				<-ej.job.done
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

// awaitEviction waits for a job holding a block of bucket idx, if there is
// one, and reports whether there was.
func (p *hostPool) awaitEviction(idx int) bool {
	p.evictMu.Lock()
	var ej *evictJob
	for _, e := range p.evicting {
		if e.buckets&(1<<idx) != 0 {
			ej = e
			break
		}
	}
	p.evictMu.Unlock()
	if ej == nil {
		return false
	}
	ej.await()
	return true
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
