package devmem

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// The driver calls a fakeDevice counts and fails.
const (
	opMemAlloc   = "MemAlloc"
	opMemFree    = "MemFree"
	opMemGetInfo = "MemGetInfo"
)

// fakeDevice is device memory for these tests (core/sim imports core,
// which imports this package): fake addresses over a byte total, every
// call counted (failed ones too), failures injected by call number, and
// the allocations still live listed, so a test can prove nothing leaked.
type fakeDevice struct {
	mu     sync.Mutex
	total  uint64
	used   uint64
	next   uint64
	live   map[uint64]uint64 // address -> bytes
	calls  map[string]uint64
	faults map[string][]fault
	// cached counts the blocks a CacheNotifier call said are in the cache.
	cached atomic.Int64
}

// fault makes one call fail (code) or return success with a null result.
type fault struct {
	countdown int
	code      cudaapi.Result
	null      bool
}

func newDevice(total uint64) *fakeDevice {
	return &fakeDevice{total: total, next: 1 << 32, live: map[uint64]uint64{}, calls: map[string]uint64{},
		faults: map[string][]fault{}}
}

// admit counts a call of op and returns the fault that falls on it.
// Callers hold mu.
func (d *fakeDevice) admit(op string) (code cudaapi.Result, null bool) {
	d.calls[op]++
	var fired *fault
	kept := d.faults[op][:0]
	for _, f := range d.faults[op] {
		if f.countdown--; f.countdown == 0 {
			if fired == nil {
				fired = &f
			}
			continue
		}
		kept = append(kept, f)
	}
	d.faults[op] = kept
	if fired != nil {
		return fired.code, fired.null
	}
	return 0, false
}

// failNth makes the nth call of op from now (1: the next) fail with code.
func (d *fakeDevice) failNth(op string, n int, code cudaapi.Result) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.faults[op] = append(d.faults[op], fault{countdown: n, code: code})
}

// nullNth makes the nth call of op from now return success and nothing.
func (d *fakeDevice) nullNth(op string, n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.faults[op] = append(d.faults[op], fault{countdown: n, null: true})
}

// count returns how many times op was called.
func (d *fakeDevice) count(op string) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls[op]
}

func (d *fakeDevice) MemGetInfo() (free, total uint64, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if code, null := d.admit(opMemGetInfo); code != 0 || null {
		if null {
			return 0, 0, nil
		}
		return 0, 0, code
	}
	return d.total - d.used, d.total, nil
}

func (d *fakeDevice) MemAlloc(n uint64) (uint64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if code, null := d.admit(opMemAlloc); code != 0 || null {
		if null {
			return 0, nil
		}
		return 0, code
	}
	if n == 0 {
		return 0, cudaapi.CUDA_ERROR_INVALID_VALUE
	}
	if n > d.total-d.used {
		return 0, cudaapi.CUDA_ERROR_OUT_OF_MEMORY
	}
	p := d.next
	d.next += (n + 255) &^ 255
	d.live[p] = n
	d.used += n
	return p, nil
}

func (d *fakeDevice) MemFree(ptr uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if code, null := d.admit(opMemFree); code != 0 || null {
		if null {
			return nil
		}
		return code
	}
	n, ok := d.live[ptr]
	if !ok {
		return cudaapi.CUDA_ERROR_INVALID_VALUE
	}
	delete(d.live, ptr)
	d.used -= n
	return nil
}

// liveBytes returns the bytes allocated and not freed.
func (d *fakeDevice) liveBytes() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.used
}

// notifyingDevice is a fakeDevice that is also a driver.CacheNotifier.
type notifyingDevice struct{ *fakeDevice }

func (d notifyingDevice) MemCached(uint64, uint64) { d.cached.Add(1) }
func (d notifyingDevice) MemReused(uint64, uint64) { d.cached.Add(-1) }
func (d notifyingDevice) HostCached([]byte)        {}
func (d notifyingDevice) HostReused([]byte)        {}

// requireNoLive fails the test when d still holds any allocation.
func requireNoLive(t *testing.T, d *fakeDevice) {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	require.Empty(t, d.live, "device allocations still live")
}

// requireErrKind asserts err is an *errs.Error of the sentinel's kind whose
// message contains every fragment.
func requireErrKind(t *testing.T, err error, sentinel error, fragments ...string) *errs.Error {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, sentinel)
	var ce *errs.Error
	require.ErrorAs(t, err, &ce)
	for _, f := range fragments {
		assert.Contains(t, err.Error(), f)
	}
	assert.Contains(t, err.Error(), "Fix: ")
	return ce
}

// newPool returns a pool over d with a budget of 9/10 of total, caching at
// most maxCached bytes, every request classed.
func newPool(d Device, total, maxCached uint64) *Pool {
	return New(d, Config{Total: total, MaxCached: maxCached, MaxClassed: 1 << 40})
}
