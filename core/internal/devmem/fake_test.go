package devmem

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/internal/fakes"
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
	mu    sync.Mutex
	total uint64
	used  uint64
	next  uint64
	live  map[uint64]uint64 // address -> bytes
	fakes.Faults
	// cached counts the blocks a CacheNotifier call said are in the cache.
	cached atomic.Int64
}

func newDevice(total uint64) *fakeDevice {
	return &fakeDevice{total: total, next: 1 << 32, live: map[uint64]uint64{}}
}

func (d *fakeDevice) MemGetInfo() (free, total uint64, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if null, err := d.Admit(opMemGetInfo); err != nil || null {
		return 0, 0, err
	}
	return d.total - d.used, d.total, nil
}

func (d *fakeDevice) MemAlloc(n uint64) (uint64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if null, err := d.Admit(opMemAlloc); err != nil || null {
		return 0, err
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
	if null, err := d.Admit(opMemFree); err != nil || null {
		return err
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

// requireErrKind is the shared assertion, under the name these tests use.
var requireErrKind = fakes.RequireErrKind

// newPool returns a pool over d with a budget of 9/10 of total, caching at
// most maxCached bytes, every request classed.
func newPool(d Device, total, maxCached uint64) *Pool {
	return New(d, Config{Total: total, MaxCached: maxCached, MaxClassed: 1 << 40})
}
