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
	// KeepReadbackLines leaves readback staging in the caches of the cores
	// that copied it out, instead of evicting its lines after the copy. The
	// next DMA into a block whose lines are cached in many cores has to
	// invalidate every copy.
	KeepReadbackLines bool
}

// WithStagingCache sets how transfer calls treat the caches around their
// staging memory (see StagingCache). By default uploads are staged with
// non-temporal stores and readback staging is evicted from the caches once
// copied out: on the reference H100 host a 1024 x 4 KiB packed upload
// packed in 50 us instead of 104 and its DMAs waited 84 us instead of 117.
// It applies to every plan that stages through pinned memory (per-copy,
// packed and staged; single calls and batches); Direct transfers of the
// caller's pinned memory touch no staging.
func WithStagingCache(s StagingCache) Option {
	return func(c *config) {
		c.xfer.plainPack, c.xfer.plainStage = s.CachedUploadStores, s.CachedUploadStores
		c.xfer.keepStaging = s.KeepReadbackLines
	}
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

// stageOut copies readback staging src (which a DMA writes next) into dst
// and then, unless keepStaging, evicts src's cache lines, so that DMA finds
// no cached copies to invalidate.
func (t *transferTuning) stageOut(dst, src []byte) {
	copy(dst, src)
	t.evictStaging(src)
}

// evictStaging evicts readback staging the caller has read, unless
// keepStaging.
func (t *transferTuning) evictStaging(src []byte) {
	if !t.keepStaging {
		ntcopy.Evict(src)
	}
}

// stageInFenced is stageIn followed by its fence, for one copy task.
func (t *transferTuning) stageInFenced(dst, src []byte) {
	t.stageIn(dst, src)
	ntcopy.Fence()
}
