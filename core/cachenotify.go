package core

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
