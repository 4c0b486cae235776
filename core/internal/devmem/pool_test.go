package devmem

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// TestPoolClassedBlocksAreCachedAndExactOnesAreNot: a classed block is
// rounded to its class and reused from the cache with no driver call; an
// exact block has the size asked for and goes back to the driver.
func TestPoolClassedBlocksAreCachedAndExactOnesAreNot(t *testing.T) {
	dev := newDevice(1 << 30)
	p := newPool(dev, 1<<30, 1<<20)
	a, err := p.Alloc("Alloc", 1000, true)
	require.NoError(t, err)
	assert.NotZero(t, a.Ptr())
	assert.Equal(t, 1000, a.Len())
	assert.Equal(t, uint64(1024), a.Size())
	require.NoError(t, p.Free("Free", a))
	assert.Equal(t, uint64(1024), p.CachedBytes())
	b, err := p.Alloc("Alloc", 1000, true)
	require.NoError(t, err)
	assert.Equal(t, a.Ptr(), b.Ptr(), "a cache hit hands back the same block")
	assert.Equal(t, uint64(1), dev.Count(opMemAlloc))

	e, err := p.Alloc("Alloc", 1000, false)
	require.NoError(t, err)
	assert.Equal(t, uint64(1000), e.Size())
	assert.Equal(t, uint64(2024), p.ReservedBytes())
	require.NoError(t, p.Free("Free", e))
	assert.Equal(t, uint64(1024), dev.liveBytes(), "an exact block goes back to the driver")
	require.NoError(t, p.Free("Free", b))
	require.NoError(t, p.Free("Free", Block{}), "the zero block is ignored")
	st := p.Stats()
	assert.Equal(t, uint64(1024), st.Cached)
	assert.Equal(t, uint64(2024), st.PeakReserved)
	p.ResetPeaks()
	assert.Equal(t, uint64(1024), p.Stats().PeakReserved)
	assert.Equal(t, uint64(1<<20), p.Config().MaxCached)
	require.NoError(t, p.Close())
	requireNoLive(t, dev)
}

func TestPoolErrorsNameTheCallAndHoldNothing(t *testing.T) {
	cases := []struct {
		name   string
		arm    func(*fakeDevice)
		n      int
		kind   error
		phrase string
	}{
		{"zero bytes", func(*fakeDevice) {}, 0, errs.ErrInvalidArgument, "request of 0 bytes"},
		{"negative", func(*fakeDevice) {}, -5, errs.ErrInvalidArgument, "request of -5 bytes"},
		{"over the budget", func(*fakeDevice) {}, 1 << 30, errs.ErrBudget, "still missing"},
		{"driver failure", func(d *fakeDevice) { d.FailNth(opMemAlloc, 1, cudaapi.CUDA_ERROR_INVALID_VALUE) },
			64, errs.ErrDriver, "MemAlloc failed for a 64-byte request"},
		{"null block", func(d *fakeDevice) { d.NullNth(opMemAlloc, 1) }, 64, errs.ErrDriver,
			"MemAlloc returned success with a null result"},
		{"null memory info", func(d *fakeDevice) { d.NullNth(opMemGetInfo, 1) }, 64, errs.ErrDriver,
			"MemGetInfo returned success with a null result"},
		{"memory info failure", func(d *fakeDevice) { d.FailNth(opMemGetInfo, 1, cudaapi.CUDA_ERROR_UNKNOWN) },
			64, errs.ErrDriver, "MemGetInfo failed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dev := newDevice(1 << 20)
			p := newPool(dev, 1<<20, 1<<20)
			c.arm(dev)
			b, err := p.Alloc("Upload", c.n, true)
			requireErrKind(t, err, c.kind, "Upload", c.phrase)
			assert.Zero(t, b.Ptr())
			assert.Zero(t, p.ReservedBytes())
			require.NoError(t, p.Close())
			requireNoLive(t, dev)
		})
	}
}

func TestPoolOutOfMemoryIsABudgetRefusalWithTheDriverCode(t *testing.T) {
	dev := newDevice(1 << 30)
	p := newPool(dev, 1<<30, 0)
	dev.FailNth(opMemAlloc, 1, cudaapi.CUDA_ERROR_OUT_OF_MEMORY)
	dev.FailNth(opMemAlloc, 2, cudaapi.CUDA_ERROR_OUT_OF_MEMORY)
	_, err := p.Alloc("Alloc", 4096, true)
	e := requireErrKind(t, err, errs.ErrBudget, "Alloc")
	assert.Equal(t, cudaapi.CUDA_ERROR_OUT_OF_MEMORY, e.Code)
	require.NoError(t, p.Close())
	requireNoLive(t, dev)
}

// TestPoolFreeFailureLeavesTheBlockWithTheCaller: a MemFree the driver
// refuses is returned, and the block is still the caller's to free again.
func TestPoolFreeFailureLeavesTheBlockWithTheCaller(t *testing.T) {
	dev := newDevice(1 << 30)
	p := newPool(dev, 1<<30, 0) // nothing cached: every free reaches the driver
	a, err := p.Alloc("Alloc", 64, true)
	require.NoError(t, err)
	dev.FailNth(opMemFree, 1, cudaapi.CUDA_ERROR_INVALID_VALUE)
	requireErrKind(t, p.Free("Free", a), errs.ErrDriver, "Free", "MemFree")
	assert.Equal(t, uint64(64), p.ReservedBytes())
	require.NoError(t, p.Free("Free", a))
	assert.Zero(t, p.ReservedBytes())
	require.NoError(t, p.Close())
	requireNoLive(t, dev)
}

// TestPoolFreeOrKeepRetriesAtTrimAndClose: a block FreeOrKeep cannot free
// is kept, counted, and freed by the next Trim; one still refused there is
// freed by Close.
func TestPoolFreeOrKeepRetriesAtTrimAndClose(t *testing.T) {
	dev := newDevice(1 << 30)
	p := newPool(dev, 1<<30, 0)
	a, err := p.Alloc("Alloc", 64, true)
	require.NoError(t, err)
	b, err := p.Alloc("Alloc", 128, true)
	require.NoError(t, err)
	dev.FailNth(opMemFree, 1, cudaapi.CUDA_ERROR_UNKNOWN)
	p.FreeOrKeep(a)
	dev.FailNth(opMemFree, 1, cudaapi.CUDA_ERROR_UNKNOWN)
	p.FreeOrKeep(b)
	n, bytes := p.UnfreedBlocks()
	assert.Equal(t, 2, n)
	assert.Equal(t, uint64(64+128), bytes)
	dev.FailNth(opMemFree, 2, cudaapi.CUDA_ERROR_UNKNOWN)
	requireErrKind(t, p.Trim("Trim"), errs.ErrDriver, "Trim", "MemFree")
	n, bytes = p.UnfreedBlocks()
	assert.Equal(t, 1, n)
	assert.Equal(t, uint64(128), bytes)
	require.NoError(t, p.Close())
	n, _ = p.UnfreedBlocks()
	assert.Zero(t, n)
	requireNoLive(t, dev)

	_, err = p.Alloc("Late", 64, true)
	requireErrKind(t, err, errs.ErrClosed, "Late", "device allocation pool is closed")
}

// TestPoolTellsTheNotifierWhatIsCached: a driver that is a CacheNotifier
// hears of every block entering the cache and leaving it for a caller.
func TestPoolTellsTheNotifierWhatIsCached(t *testing.T) {
	dev := newDevice(1 << 30)
	p := newPool(notifyingDevice{dev}, 1<<30, 1<<20)
	a, err := p.Alloc("Alloc", 64, true)
	require.NoError(t, err)
	require.NoError(t, p.Free("Free", a))
	assert.Equal(t, int64(1), dev.cached.Load())
	a, err = p.Alloc("Alloc", 64, true)
	require.NoError(t, err)
	assert.Zero(t, dev.cached.Load())
	require.NoError(t, p.Free("Free", a))
	require.NoError(t, p.Trim("Trim"))
	assert.Zero(t, p.CachedBytes())
	require.NoError(t, p.Close())
	requireNoLive(t, dev)
}

func TestIsOutOfMemory(t *testing.T) {
	assert.True(t, isOutOfMemory(cudaapi.CUDA_ERROR_OUT_OF_MEMORY))
	assert.False(t, isOutOfMemory(cudaapi.CUDA_ERROR_INVALID_VALUE))
	assert.False(t, isOutOfMemory(nil))
}
