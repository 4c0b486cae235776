package core

import "github.com/vyre-go/vyrecuda/internal/ntcopy"

// StagingCache says how transfer calls treat the processor's caches around
// their pinned staging memory, which the device reads (uploads) or writes
// (readbacks) by DMA. Its zero value is the default, chosen by measurement
// on the reference H100 host (see WithStagingCache); the fields exist for
// hosts whose caches behave otherwise.
type StagingCache struct {
	// CachedUploadStores copies uploads into staging with ordinary stores,
	// which leave the staged lines modified in the copying cores' caches,
	// instead of non-temporal stores, which send them to memory. A DMA that
	// reads lines held modified in caches is slower.
	CachedUploadStores bool
	// Evict says when a readback, once its staging is copied out, evicts
	// that staging's lines from the caches. The next DMA into staging whose
	// lines are cached in many cores has to invalidate every copy; the
	// eviction itself costs processor time. Download calls leave
	// it to the copy helpers after they return, which do it when no call's
	// copying needs them. A transfer that needs that staging meanwhile
	// waits for it; readbacks of one size that follow one another get a
	// second set of staging (within the pinned cache's cap), so they
	// alternate between an evicted set and one being evicted. Single
	// readbacks of up to 2 MiB and readbacks of many buffers that move in
	// parts (up to 16 MiB) evict inside their copy out until the second of
	// two that come within 2 ms pins their second set before it returns
	// (that one call takes milliseconds longer); the others get theirs
	// pinned in the background once they have waited for an eviction
	// twice. Larger single readbacks evict inside their copy out, and batch
	// reads inside their unpack. Trim, Close and the pool statistics wait
	// for every eviction.
	Evict ReadbackEvict
}

// ReadbackEvict says which readbacks evict their staging from the caches
// after copying it out.
type ReadbackEvict uint8

const (
	// EvictBySize evicts the staging of readbacks of 1 MiB to 64 MiB: the
	// default. Measured on the reference H100 host: a DMA into staging
	// whose lines the last copy out left cached is slower (1 MiB: 47-58 us
	// against 26-27 into evicted lines, in a C program), and with the
	// eviction inside the unpack the fence of a 1024 x 4 KiB readback took
	// 82 us instead of 157, a 2048-buffer 52.9 MiB one 1058 us instead of
	// 2185, and single 4, 16 and 64 MiB readbacks ran at 36, 40-41 and
	// 43-47 GB/s instead of 22-24, 30-33 and 27-42. Smaller readbacks lost
	// (64 KiB: 15-18 us against 14-15 even with the eviction after the
	// call; 256 KiB gained 2 us in a long run of calls but lost 4-10 us in
	// the bench's ten, which pay for its second set of staging), and so
	// did 256 MiB (35 GB/s instead of 49), whose staging ring is reused
	// within the call long after its lines left the caches. Evicting after
	// the call returned, W3's unpack took 50-55 us instead of 88 and W7D's
	// call 2.32 ms instead of 2.48.
	EvictBySize ReadbackEvict = iota
	// EvictNever leaves readback staging in the caches.
	EvictNever
	// EvictAlways evicts the staging of every staged readback.
	EvictAlways
)

// The readback sizes EvictBySize evicts the staging of.
const (
	evictMinBytes = 1 << 20
	evictMaxBytes = 64 << 20
)

// WithStagingCache sets how transfer calls treat the caches around their
// staging memory (see StagingCache). By default uploads are staged with
// non-temporal stores (on the reference H100 host single uploads of 1, 4
// and 16 MiB ran at 22, 31-33 and 37-39 GB/s with them against 15-18,
// 18-24 and 25-26 with ordinary stores; 1024 x 4 KiB packed in 50 us
// instead of 104, its DMAs waiting 84 us instead of 117), and readbacks of
// 1 to 64 MiB evict their staging once copied out (EvictBySize). It applies
// to every plan that stages through pinned memory (per-copy, packed and
// staged; single calls and batches); Direct transfers of the caller's
// pinned memory touch no staging.
func WithStagingCache(s StagingCache) Option {
	return func(c *config) {
		c.xfer.plainPack, c.xfer.plainStage = s.CachedUploadStores, s.CachedUploadStores
		c.xfer.evict = s.Evict
	}
}

// evictsReadback reports whether a readback of bytes evicts its staging
// under t's policy.
func (t *transferTuning) evictsReadback(bytes uint64) bool {
	switch t.evict {
	case EvictNever:
		return false
	case EvictAlways:
		return true
	}
	return bytes >= evictMinBytes && bytes <= evictMaxBytes
}

// evictOverlapMaxBytes is the largest readback in parts (packedread.go)
// that EvictBySize evicts, while copying it out, once it has landed. On the
// reference H100 host (core's BenchmarkGPUW3Phases and W7DPhases, variants
// default and keep-staging) 1024 x 4 KiB in 5 parts landed in 64 us after
// its first part with eviction and 151 without (304 against 358 us in
// all), while 2048 buffers of 52.9 MiB in 18 parts landed in 1238 and
// 1198 us with it against 977 and 997 without, and its copy-out ended 313
// and 2304 us later against 104 and 152: past the caches' size the
// eviction only takes memory bandwidth from the DMA and the copy-out.
// Once the staging's bucket holds a second block, such a readback leaves
// the eviction to the helpers after the call instead (partsEviction).
const evictOverlapMaxBytes = 16 << 20

// evictLaterMaxBytes is the largest staged single readback that leaves its
// eviction to the helpers after the call, using a second set of staging
// while readbacks follow one another (the second of two within the spare
// window pins it before returning: hostmem.Pool.DeferEviction). With the second set
// pinned in the background, on the reference H100 host, 300 calls in a row
// (BenchmarkGPUSinglePhases), readbacks of 1, 4 and 16 MiB took 46-50,
// 117-127 and 388-399 us with the eviction after the call against 51-70,
// 121-196 and 436-474 in the copy out, and ten or sixty 1 MiB calls in a
// bench of that size alone 48-58 us against 52-61. But 4 and 16 MiB gained
// nothing in the bench's ten calls (their second set, 5 and 20 MiB of
// pinned memory, takes 4-13 ms to pin and stalls the driver calls beside
// it), 64 MiB lost (4.1-4.7 ms against 1.5-2.1), and after the bench's
// workloads even 1 MiB lost in most rounds (63-113 us against 58-95): the
// calls met the pinning of the second set, or waited for evictions the
// helpers had not finished (one round's calls spent 41 us per wait).
// Pinned by the second call itself, 1 MiB readbacks took 43.8-54.7 us
// against 51.4-86.2 in the full `vyrecuda bench` (six rounds against seven
// of the previous binary, alternated; a seventh was slow at every size)
// and 45.3-62.8 against 56.3-61.6 in a 1-16 MiB sweep alone; a limit of 16
// MiB left 4 and 16 MiB within noise and made the 64 MiB readbacks after
// them 2.5-5.4 ms against 1.5-1.6.
const evictLaterMaxBytes = 2 << 20

// evictsOverlapped reports whether a readback of bytes in parts evicts its
// staging as it copies each part out, under t's policy.
func (t *transferTuning) evictsOverlapped(bytes uint64) bool {
	if t.evict == EvictBySize {
		return t.evictsReadback(bytes) && bytes <= evictOverlapMaxBytes
	}
	return t.evictsReadback(bytes)
}

// stageIn copies src into upload staging dst (which a DMA reads next) as t
// says: with non-temporal stores unless plainStage. The goroutine that
// called it must call ntcopy.Fence before it signals that the copy is done:
// the fence orders its non-temporal stores before that signal, as the
// staging's reader (the caller queueing the DMA) needs. A goroutine moved
// to another thread between its stores and its fence is safe too: the
// move passes through the scheduler's locked instructions (or an
// interrupt), which drain the old thread's write-combining buffers.
func (t *transferTuning) stageIn(dst, src []byte) {
	if t.plainStage {
		copy(dst, src)
		return
	}
	ntcopy.Copy(dst, src)
}

// stageInFenced is stageIn followed by its fence, for one copy task.
func (t *transferTuning) stageInFenced(dst, src []byte) {
	t.stageIn(dst, src)
	ntcopy.Fence()
}

// stageOut copies readback staging src (which a DMA writes next) into dst
// and then, when this call evicts (evictReads), evicts src's cache lines,
// so that DMA finds no cached copies to invalidate.
func (t *transferTuning) stageOut(dst, src []byte) {
	copy(dst, src)
	t.evictStaging(src)
}

// evictStaging evicts readback staging the caller has read, when this
// call evicts (evictReads).
func (t *transferTuning) evictStaging(src []byte) {
	if t.evictReads {
		ntcopy.Evict(src)
	}
}
