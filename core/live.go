package core

// LiveResidentBuffers returns how many resident buffers are live (allocated
// and not freed, including those an OptimizerDispatcher owns) and their
// bytes. Tests call it before Close to catch a forgotten Free, which
// Close would otherwise free silently; sim.CloseChecked does. A nil or
// closed Backend has none.
func (b *Backend) LiveResidentBuffers() (count int, bytes uint64) {
	if b == nil {
		return 0, 0
	}
	b.store.mu.RLock()
	defer b.store.mu.RUnlock()
	b.store.table.each(func(_ uint64, e *residentEntry) {
		bytes += uint64(e.n) // lengths are positive ints bounded by device memory
	})
	return b.store.table.len(), bytes
}
