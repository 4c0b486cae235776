package transfer

import "github.com/vyre-go/vyrecuda/internal/ntcopy"

// EvictPolicy says which readbacks evict their staging from the caches
// after copying it out; core's StagingCache.Evict converts to it.
type EvictPolicy uint8

const (
	// EvictBySize evicts the staging of readbacks of evictMinBytes to
	// evictMaxBytes: the default.
	EvictBySize EvictPolicy = iota
	// EvictNever leaves readback staging in the caches.
	EvictNever
	// EvictAlways evicts the staging of every staged readback.
	EvictAlways
)

// The readback sizes EvictBySize evicts the staging of (core's
// ReadbackEvict documents the measurements behind them).
const (
	evictMinBytes = 1 << 20
	evictMaxBytes = 64 << 20
)

// EvictsReadback reports whether a readback of bytes evicts its staging
// under t's policy.
func (t *Tuning) EvictsReadback(bytes uint64) bool {
	switch t.Evict {
	case EvictNever:
		return false
	case EvictAlways:
		return true
	}
	return bytes >= evictMinBytes && bytes <= evictMaxBytes
}

// evictOverlapMaxBytes is the largest readback in parts
// (packedread.go) that EvictBySize evicts, while copying it out, once it
// has landed. On the reference H100 host (core's BenchmarkGPUW3Phases and
// W7DPhases, variants default and keep-staging) 1024 x 4 KiB in 5 parts
// landed in 64 us after its first part with eviction and 151 without (304
// against 358 us in all), while 2048 buffers of 52.9 MiB in 18 parts
// landed in 1238 and 1198 us with it against 977 and 997 without, and its
// copy-out ended 313 and 2304 us later against 104 and 152: past the
// caches' size the eviction only takes memory bandwidth from the DMA and
// the copy-out. Once the staging's bucket holds a second block, such a
// readback leaves the eviction to the helpers after the call instead
// (partsEviction).
const evictOverlapMaxBytes = 16 << 20

// EvictLaterMaxBytes is the largest staged single readback that leaves its
// eviction to the helpers after the call, using a second set of staging
// while readbacks follow one another (the second of two within the spare
// window pins it before returning: hostmem.Pool.DeferEviction). With the
// second set pinned in the background, on the reference H100 host, 300 calls
// in a row (BenchmarkGPUSinglePhases), readbacks of 1, 4 and 16 MiB took
// 46-50, 117-127 and 388-399 us with the eviction after the call against
// 51-70, 121-196 and 436-474 in the copy out, and ten or sixty 1 MiB calls
// in a bench of that size alone 48-58 us against 52-61. But 4 and 16 MiB
// gained nothing in the bench's ten calls (their second set, 5 and 20 MiB of
// pinned memory, takes 4-13 ms to pin and stalls the driver calls beside
// it), 64 MiB lost (4.1-4.7 ms against 1.5-2.1), and after the bench's
// workloads even 1 MiB lost in most rounds (63-113 us against 58-95): the
// calls met the pinning of the second set, or waited for evictions the
// helpers had not finished (one round's calls spent 41 us per wait). Pinned
// by the second call itself, 1 MiB readbacks took 43.8-54.7 us against
// 51.4-86.2 in the full `vyrecuda bench` (six rounds against seven of the
// previous binary, alternated; a seventh was slow at every size) and
// 45.3-62.8 against 56.3-61.6 in a 1-16 MiB sweep alone; a limit of 16 MiB
// left 4 and 16 MiB within noise and made the 64 MiB readbacks after them
// 2.5-5.4 ms against 1.5-1.6.
const EvictLaterMaxBytes = 2 << 20

// EvictsOverlapped reports whether a readback of bytes in parts evicts its
// staging as it copies each part out, under t's policy.
func (t *Tuning) EvictsOverlapped(bytes uint64) bool {
	if t.Evict == EvictBySize {
		return t.EvictsReadback(bytes) && bytes <= evictOverlapMaxBytes
	}
	return t.EvictsReadback(bytes)
}

// StageIn copies src into upload staging dst (which a DMA reads next) as t
// says: with non-temporal stores unless PlainStage. The goroutine that
// called it must call ntcopy.Fence before it signals that the copy is done:
// the fence orders its non-temporal stores before that signal, as the
// staging's reader (the caller queueing the DMA) needs. A goroutine moved
// to another thread between its stores and its fence is safe too: the
// move passes through the scheduler's locked instructions (or an
// interrupt), which drain the old thread's write-combining buffers.
func (t *Tuning) StageIn(dst, src []byte) {
	if t.PlainStage {
		copy(dst, src)
		return
	}
	ntcopy.Copy(dst, src)
}

// StageInFenced is StageIn followed by its fence, for one copy task.
func (t *Tuning) StageInFenced(dst, src []byte) {
	t.StageIn(dst, src)
	ntcopy.Fence()
}

// StageOut copies readback staging src (which a DMA writes next) into dst
// and then, when this call evicts (EvictReads), evicts src's cache lines,
// so that DMA finds no cached copies to invalidate.
func (t *Tuning) StageOut(dst, src []byte) {
	copy(dst, src)
	t.EvictStaging(src)
}

// EvictStaging evicts readback staging the caller has read, when this
// call evicts (EvictReads).
func (t *Tuning) EvictStaging(src []byte) {
	if t.EvictReads {
		ntcopy.Evict(src)
	}
}

// stagePlainMax is the most upload bytes a call stages with ordinary
// stores instead of non-temporal ones: at that size the bytes stay in the
// caches anyway, and non-temporal stores cost both the copy and the driver
// calls after it. On the H100 host, a Run of a 16 KiB upload and a 16 KiB
// read from Go slices (BenchmarkGPURunSmallPhases, since folded into core's
// BenchmarkGPURunPhases; the stores chosen
// with StagingCache.CachedUploadStores, one command) staged in 3.4-3.6 us
// and queued in 10.4-11.1 us with non-temporal stores, against 0.9-1.0 and
// 7.1-7.4 us with ordinary ones (24-25 against 18-19 us in all). Only 16
// KiB was measured; the bound is the largest single upload the driver
// stages itself (PageableMax).
const stagePlainMax = PageableMax

// stageSmall has t stage a call of bytes upload bytes with ordinary
// stores when there are at most stagePlainMax of them.
func (t *Tuning) stageSmall(bytes uint64) {
	if bytes <= stagePlainMax {
		t.PlainStage, t.PlainPack = true, true
	}
}
