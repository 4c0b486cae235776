package core

// MemoryStats is a snapshot of a Backend's memory: what its buffers use,
// what it holds from the driver, what it keeps cached, and how often it had
// to ask the driver. The PyTorch names in brackets are the
// torch.cuda.memory_stats keys (summed over pools) that mean the same.
type MemoryStats struct {
	// Allocated is the bytes of live resident buffers, as requested
	// [allocated_bytes.all.current, but PyTorch counts rounded sizes];
	// PeakAllocated its highest value since Open or ResetPeakMemoryStats
	// [allocated_bytes.all.peak].
	Allocated, PeakAllocated uint64
	// Reserved is the device bytes held from the driver: live buffers and
	// in-use staging at their rounded sizes, plus the device cache
	// [reserved_bytes.all.current]; PeakReserved its highest value
	// [reserved_bytes.all.peak].
	Reserved, PeakReserved uint64
	// CachedDevice is the bytes of freed device blocks kept for reuse
	// [reserved_bytes.all.current - active_bytes.all.current]; CachedPinned
	// the pinned host staging bytes kept for reuse (PyTorch's host
	// allocator, outside memory_stats).
	CachedDevice, CachedPinned uint64
	// DeviceAllocs and DeviceFrees count the driver's device allocation and
	// free calls that succeeded [num_device_alloc, num_device_free].
	DeviceAllocs, DeviceFrees uint64
	// AllocRetries counts allocations that gave cached memory back and
	// tried again [num_alloc_retries].
	AllocRetries uint64
	// OOMs counts allocations refused for lack of memory or budget after
	// the retries [num_ooms].
	OOMs uint64

	// Budget is the most device bytes the Backend reserves: 9/10 of device
	// memory.
	Budget uint64
	// DeviceCacheCap and PinnedCacheCap are the caps on the two caches.
	DeviceCacheCap, PinnedCacheCap uint64
	// CacheHits counts device allocations served from the cache with no
	// driver call; CacheMisses those that needed a new block.
	CacheHits, CacheMisses uint64
	// FreeMemoryReads counts the driver's free-memory queries (one per
	// cache miss, more when a miss releases cached memory and retries).
	FreeMemoryReads uint64
	// ReleasedBytes is the cached device bytes given back to the driver by
	// retries and Trim [inactive_split_bytes freed by empty_cache, roughly].
	ReleasedBytes uint64
	// ReservedPinned is the pinned staging bytes held from the driver: in
	// use plus cached, plus blocks the driver failed to free (kept for the
	// next Trim or Close to retry).
	ReservedPinned uint64
}

// MemoryStats returns a snapshot of the Backend's memory accounting. It is
// safe to call at any time, also after Close: then everything held is 0,
// except memory the driver failed to free (counted until a later Close
// frees it) and memory Close left to unfinished work of a stream it could
// not synchronize.
func (b *Backend) MemoryStats() MemoryStats {
	if b == nil {
		return MemoryStats{}
	}
	st := b.devPool.Stats()
	cfg := b.devPool.Config()
	return MemoryStats{
		Allocated:       b.store.bytes.Load(),
		PeakAllocated:   b.store.peak.Load(),
		Reserved:        st.Reserved,
		PeakReserved:    st.PeakReserved,
		CachedDevice:    st.Cached,
		CachedPinned:    b.hostPool.CachedBytes(),
		DeviceAllocs:    st.DeviceAllocs,
		DeviceFrees:     st.DeviceFrees,
		AllocRetries:    st.Retries,
		OOMs:            st.OOMs,
		Budget:          cfg.Budget,
		DeviceCacheCap:  cfg.MaxCached,
		PinnedCacheCap:  b.hostPool.Cap(),
		CacheHits:       st.Hits,
		CacheMisses:     st.Misses,
		FreeMemoryReads: st.FreeMemoryReads,
		ReleasedBytes:   st.Released,
		ReservedPinned:  b.hostPool.ReservedBytes(),
	}
}

// ResetPeakMemoryStats sets PeakAllocated and PeakReserved to their current
// values.
func (b *Backend) ResetPeakMemoryStats() {
	if b == nil {
		return
	}
	b.devPool.ResetPeaks()
	b.store.peak.Store(b.store.bytes.Load())
}
