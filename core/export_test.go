package core

// Test hooks for package core_test (the external tests, which can import
// core/sim without an import cycle).

// PinForTest takes the in-flight guard dispatch code takes, so tests can hold
// buffers in flight.
func PinForTest(b *Backend, bufs []Buffer) (ptrs []uint64, release func(), err error) {
	return b.store.pin("PinForTest", bufs)
}

// SetResidentBytesForTest corrupts the resident byte accounting, to exercise
// the rebuild-from-table repair.
func SetResidentBytesForTest(b *Backend, v uint64) { b.store.bytes.Store(v) }

// HandleIDsForTest returns the process-wide handle id counter's value.
func HandleIDsForTest() uint64 { return handleIDs.Load() }

// SetHandleIDsForTest sets the process-wide handle id counter, to exercise
// id exhaustion; tests using it must not run in parallel with others.
func SetHandleIDsForTest(v uint64) { handleIDs.Store(v) }

// SetPinHookForTest has f called inside every pin of b's resident buffers,
// after the handles are validated and before they are marked in flight.
// Tests using it must not run in parallel with others.
func SetPinHookForTest(b *Backend, f func()) (restore func()) {
	old := pinHook
	pinHook = func(s *residentStore) {
		if s == &b.store {
			f()
		}
	}
	return func() { pinHook = old }
}

// ResidentStoreFreeForTest reports whether Free could take the
// resident table's lock right now (nothing holds it, shared or exclusive).
func ResidentStoreFreeForTest(b *Backend) bool {
	if !b.store.mu.TryLock() {
		return false
	}
	b.store.mu.Unlock()
	return true
}
