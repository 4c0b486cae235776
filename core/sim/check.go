package sim

// Backend is what the checks below use of a core.Backend (a *core.Backend
// satisfies it), so this package needs nothing of core but the seam.
type Backend interface {
	// LiveResidentBuffers reports the resident buffers still live and
	// their bytes.
	LiveResidentBuffers() (count int, bytes uint64)
	// Close closes the Backend.
	Close() error
}

// RequireNoLiveResident reports a test error when b still holds live
// resident buffers, and returns whether it held none. Call it before
// b.Close: Close frees every resident buffer, so a leak check after it
// cannot see a forgotten Free. Buffers an OptimizerDispatcher owns
// count until the dispatcher is closed.
func RequireNoLiveResident(t TB, b Backend) bool {
	t.Helper()
	if n, bytes := b.LiveResidentBuffers(); n > 0 {
		t.Errorf("sim: %d resident buffer(s) (%d bytes) still live before Close: a Free (or a dispatcher's Close) is missing", n, bytes)
		return false
	}
	return true
}

// CloseChecked is the end of a test over a Backend on d: it fails the test
// when resident buffers are still live (RequireNoLiveResident), closes b,
// fails the test when Close fails, and then when anything is left on the
// device (RequireNoLeaks). Use it in t.Cleanup. Faults armed with FailNth
// or NullNth that never fired stay armed and may fail Close: call
// ClearFaults once the code under test has run.
func CloseChecked(t TB, b Backend, d *Device) {
	t.Helper()
	RequireNoLiveResident(t, b)
	if err := b.Close(); err != nil {
		t.Errorf("sim: Close: %v", err)
	}
	RequireNoLeaks(t, d)
}
