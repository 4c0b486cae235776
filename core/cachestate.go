package core

import "github.com/vyre-go/vyrecuda/core/internal/transfer"

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
		c.xfer.PlainPack, c.xfer.PlainStage = s.CachedUploadStores, s.CachedUploadStores
		c.xfer.Evict = s.Evict.policy()
	}
}

// policy is e as the transfer tuning's eviction policy; a value that is
// none of the constants evicts by size, as EvictBySize does.
func (e ReadbackEvict) policy() transfer.EvictPolicy {
	switch e {
	case EvictNever:
		return transfer.EvictNever
	case EvictAlways:
		return transfer.EvictAlways
	}
	return transfer.EvictBySize
}
