//go:build gpu && cgo

package cudaapi

import (
	"errors"
	"runtime"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hidingLibrary is the real libcuda with some symbols hidden, as an older
// driver would lack them.
type hidingLibrary struct {
	lib    driverLibrary
	hidden map[string]bool
}

func (h hidingLibrary) Lookup(name string) (uintptr, error) {
	if h.hidden[name] {
		return 0, errors.New("hidden by the test")
	}
	return h.lib.Lookup(name)
}

func (h hidingLibrary) driverVersion() int { return h.lib.driverVersion() }

// useRealDriverHiding swaps the loader to the real libcuda minus hidden, for
// the rest of the test, and makes device 0's primary context current.
func useRealDriverHiding(t *testing.T, hidden ...string) {
	t.Helper()
	if err := Loaded(); err != nil {
		t.Skipf("no CUDA driver: %v", err)
	}
	h := hidingLibrary{hidden: map[string]bool{}}
	for _, n := range hidden {
		h.hidden[n] = true
	}
	restore := driver.Swap(func() (library, error) {
		lib, err := openDefault()
		if err != nil {
			return nil, err
		}
		h.lib = lib.(driverLibrary)
		return h, nil
	})
	t.Cleanup(restore)
	require.NoError(t, Init(0))
	dev, err := DeviceGet(0)
	require.NoError(t, err)
	ctx, err := DevicePrimaryCtxRetain(dev)
	require.NoError(t, err)
	runtime.LockOSThread()
	t.Cleanup(func() {
		assert.NoError(t, DevicePrimaryCtxRelease(dev))
		runtime.UnlockOSThread()
	})
	require.NoError(t, CtxSetCurrent(ctx))
}

// elapsedOfMemset times a 16 MiB memset between two events.
func elapsedOfMemset(t *testing.T) float32 {
	t.Helper()
	s, err := StreamCreate(CU_STREAM_NON_BLOCKING)
	require.NoError(t, err)
	defer func() { assert.NoError(t, StreamDestroy(s)) }()
	start, err := EventCreate(CU_EVENT_DEFAULT)
	require.NoError(t, err)
	defer func() { assert.NoError(t, EventDestroy(start)) }()
	end, err := EventCreate(CU_EVENT_DEFAULT)
	require.NoError(t, err)
	defer func() { assert.NoError(t, EventDestroy(end)) }()
	d, err := MemAlloc(16 << 20)
	require.NoError(t, err)
	defer func() { assert.NoError(t, MemFree(d)) }()
	require.NoError(t, EventRecord(start, s))
	require.NoError(t, MemsetD8Async(d, 1, 16<<20, s))
	require.NoError(t, EventRecord(end, s))
	require.NoError(t, EventSynchronize(end))
	ms, err := EventElapsedTime(start, end)
	require.NoError(t, err)
	return ms
}

func TestGPUEventElapsedTimeResolvesNewest(t *testing.T) {
	useRealDriverHiding(t)
	ms := elapsedOfMemset(t)
	assert.Positive(t, ms)
	v, err := DriverGetVersion()
	require.NoError(t, err)
	if v >= 12080 {
		assert.Equal(t, "cuEventElapsedTime_v2", procEventElapsedTime.Symbol())
	}
	t.Logf("driver %d: EventElapsedTime called %s: %.3f ms", v, procEventElapsedTime.Symbol(), ms)
}

// TestGPUEventElapsedTimeFallback hides cuEventElapsedTime_v2, as a driver
// older than CUDA 12.8 lacks it: the wrapper must call cuEventElapsedTime and
// measure the same work.
func TestGPUEventElapsedTimeFallback(t *testing.T) {
	useRealDriverHiding(t, "cuEventElapsedTime_v2")
	ms := elapsedOfMemset(t)
	assert.Positive(t, ms)
	assert.Equal(t, "cuEventElapsedTime", procEventElapsedTime.Symbol())
	t.Logf("EventElapsedTime called %s: %.3f ms", procEventElapsedTime.Symbol(), ms)

	// Both hidden: a *MissingSymbolError naming both, the version that
	// introduced the call and the loaded driver's version.
	useRealDriverHiding(t, "cuEventElapsedTime_v2", "cuEventElapsedTime")
	_, err := EventElapsedTime(1, 2)
	var ms2 *MissingSymbolError
	require.True(t, errors.As(err, &ms2), "got %v", err)
	assert.Equal(t, []string{"cuEventElapsedTime"}, ms2.Fallbacks)
	v, verr := DriverGetVersion()
	require.NoError(t, verr)
	assert.Equal(t, int(v), ms2.Driver)
	t.Logf("%v", err)
}

// TestGPUMissingBatchCopies hides cuMemcpyBatchAsync_v2 as a pre-13.0 driver
// would: the call fails cleanly and capabilities drop batched copies only.
func TestGPUMissingBatchCopies(t *testing.T) {
	useRealDriverHiding(t, "cuMemcpyBatchAsync_v2")
	d, err := MemAlloc(4096)
	require.NoError(t, err)
	defer func() { assert.NoError(t, MemFree(d)) }()
	err = MemcpyBatchAsync([]DevicePtr{d}, []DevicePtr{d}, []uint64{16}, unsafe.Pointer(nil), nil, 0)
	var ms *MissingSymbolError
	require.True(t, errors.As(err, &ms), "got %v", err)
	assert.Equal(t, 13000, ms.Since)
	assert.Positive(t, ms.Driver)
	t.Logf("%v", err)
	c, err := DriverCapabilities()
	require.NoError(t, err)
	assert.False(t, c.Has(FeatureBatchedCopies))
	for _, f := range Features() {
		if f != FeatureBatchedCopies {
			assert.True(t, c.Has(f), "%s: %v", f, c.Why(f))
		}
	}
}
