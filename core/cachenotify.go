package core

// CacheNotifier is an optional Driver capability, found by type assertion:
// the Backend tells it when device memory or pinned host staging goes into
// one of its caches (freed by its user but kept allocated for reuse) and
// when it comes out again. Between the two calls no kernel or copy may
// touch the memory, so a driver can refuse access the way compute-sanitizer
// would; core/sim does with Config.PoisonCache. The calls are
// notifications: they cannot fail, must not call back into the Backend, and
// may be repeated for memory already in that state.
type CacheNotifier interface {
	// MemCached reports that the n bytes of the device allocation at ptr
	// went into a cache.
	MemCached(ptr, n uint64)
	// MemReused reports that the n bytes at ptr left the cache to be used.
	MemReused(ptr, n uint64)
	// HostCached reports that buf, a block from HostAlloc, went into the
	// pinned staging cache.
	HostCached(buf []byte)
	// HostReused reports that buf left the pinned staging cache to be used.
	HostReused(buf []byte)
}

// cacheNotifier returns drv's CacheNotifier, or nil.
func cacheNotifier(drv Driver) CacheNotifier {
	n, _ := drv.(CacheNotifier)
	return n
}

// notifyResident reports a resident buffer entering (cached) or leaving the
// optimizer dispatcher's free pool. It costs one nil check when the driver
// has no CacheNotifier.
func (b *Backend) notifyResident(h Buffer, cached bool) {
	if b.notify == nil {
		return
	}
	b.store.mu.RLock()
	e := b.store.table.get(h.ID)
	b.store.mu.RUnlock()
	if e == nil {
		return
	}
	if cached {
		b.notify.MemCached(e.ptr, uint64(e.n))
	} else {
		b.notify.MemReused(e.ptr, uint64(e.n))
	}
}
