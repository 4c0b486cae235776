package core_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
	"github.com/vyre-go/vyrecuda/internal/churn"
)

// requireDeviceHoldsReserved checks that the device holds exactly the bytes
// the Backend says it reserves, and that live + cached = reserved.
func requireDeviceHoldsReserved(t *testing.T, b *core.Backend, dev *sim.Device) core.MemoryStats {
	t.Helper()
	st := b.MemoryStats()
	require.Equal(t, dev.Live().DeviceBytes, st.Reserved, "device bytes vs Reserved: %+v", st)
	dc, pc := b.MemoryStats().CachedDevice, b.MemoryStats().CachedPinned
	require.Equal(t, dc, st.CachedDevice)
	require.Equal(t, pc, st.CachedPinned)
	require.LessOrEqual(t, st.Reserved, st.Budget)
	return st
}

// The scenario from the issue, on a 1 MiB device: a freed 800,000-byte
// buffer's memory serves a 200,000-byte one, and a second 800,000-byte one
// is a cache hit that makes no driver call.
func TestFreedMemoryServesLaterAllocations1MiB(t *testing.T) {
	b, dev := openSim(t, sim.Config{TotalMemory: 1 << 20})
	h, err := b.Alloc(800000)
	require.NoError(t, err)
	require.NoError(t, b.Free(h))

	calls := dev.CallCounts()
	h, err = b.Alloc(800000)
	require.NoError(t, err, "a second 800,000-byte buffer is a cache hit")
	require.NoError(t, b.Free(h))
	assert.Equal(t, calls, dev.CallCounts(), "a cache hit and a cached free make no driver call")

	small, err := b.Alloc(200000)
	require.NoError(t, err, "cached memory is the Backend's own: it must serve an allocation that fits")
	st := requireDeviceHoldsReserved(t, b, dev)
	assert.Equal(t, uint64(1), st.AllocRetries)
	assert.Zero(t, st.OOMs)
	assert.Zero(t, st.CachedDevice)
	assert.Equal(t, uint64(200000), st.Allocated)
	assert.Equal(t, uint64(800000), st.PeakAllocated)
	require.NoError(t, b.Free(small))

	// And the other way round: the small one cached, the large one fits.
	h, err = b.Alloc(800000)
	require.NoError(t, err)
	require.NoError(t, b.Free(h))
	requireDeviceHoldsReserved(t, b, dev)
}

// Power-of-two rounding used to take device bytes the budget never saw: on
// a 1,000,000-byte device an 800,000-byte buffer passed the budget and then
// failed as a driver out-of-memory.
func TestRoundingStaysInsideTheBudget(t *testing.T) {
	b, dev := openSim(t, sim.Config{TotalMemory: 1_000_000})
	h, err := b.Alloc(800000)
	require.NoError(t, err)
	st := requireDeviceHoldsReserved(t, b, dev)
	assert.GreaterOrEqual(t, st.Reserved, uint64(800000))
	assert.Less(t, st.Reserved-800000, uint64(800000/8), "rounding wastes less than 1/8")
	// What does not fit is refused as ErrBudget, never as a driver failure.
	_, err = b.Alloc(100000)
	requireKind(t, err, core.ErrBudget, "900000-byte budget", "still missing")
	require.NoError(t, b.Free(h))
}

// Fill a 64 MiB device with mixed sizes, free everything: any size up to the
// budget must then be allocatable, 32 MiB included.
func TestAfterFreeingEverythingTheWholeBudgetIsAvailable(t *testing.T) {
	b, dev := openSim(t, sim.Config{TotalMemory: 64 << 20})
	var hs []core.Buffer
	for i := 0; ; i++ {
		h, err := b.Alloc(1 + (i*7919)%(3<<20))
		if err != nil {
			requireKind(t, err, core.ErrBudget)
			break
		}
		hs = append(hs, h)
	}
	require.Greater(t, len(hs), 10)
	for _, h := range hs {
		require.NoError(t, b.Free(h))
	}
	budget := b.MemoryStats().Budget
	for _, n := range []int{32 << 20, int(budget), int(budget) - 1, 1, int(budget)/2 + 1} {
		h, err := b.Alloc(n)
		require.NoError(t, err, "%d bytes after everything was freed (budget %d)", n, budget)
		requireDeviceHoldsReserved(t, b, dev)
		require.NoError(t, b.Free(h))
	}
	_, err := b.Alloc(int(budget) + 1)
	requireKind(t, err, core.ErrBudget, "still missing")
}

// Buffers up to 64 MiB are served from the cache, rounded by less than 1/8.
func TestLargeBuffersAreCachedWithoutDoubleWaste(t *testing.T) {
	b, dev := openSim(t, sim.Config{TotalMemory: 1 << 30})
	for _, n := range []int{1<<20 + 1, 33 << 20, 64<<20 - 3, 64 << 20} {
		h, err := b.Alloc(n)
		require.NoError(t, err)
		st := b.MemoryStats()
		assert.Less(t, 8*(st.Reserved-st.CachedDevice-uint64(n)), uint64(n), "n=%d reserved %d", n, st.Reserved)
		require.NoError(t, b.Free(h))
		allocs := dev.Calls(sim.OpMemAlloc)
		h, err = b.Alloc(n)
		require.NoError(t, err)
		assert.Equal(t, allocs, dev.Calls(sim.OpMemAlloc), "n=%d: a freed buffer of the same size is a cache hit", n)
		require.NoError(t, b.Free(h))
	}
	requireDeviceHoldsReserved(t, b, dev)
}

func TestTrimGivesEveryCachedBlockBack(t *testing.T) {
	b, dev := openSim(t, sim.Config{TotalMemory: 1 << 30})
	keep, err := b.Alloc(5000)
	require.NoError(t, err)
	require.NoError(t, b.Upload(core.UploadAt{Buf: keep, Data: make([]byte, 5000)})) // leaves pinned staging cached
	for _, n := range []int{100, 70000, 3 << 20} {
		h, err := b.Alloc(n)
		require.NoError(t, err)
		require.NoError(t, b.Free(h))
	}
	dc, pc := b.MemoryStats().CachedDevice, b.MemoryStats().CachedPinned
	require.NotZero(t, dc)
	require.NotZero(t, pc)
	st := b.MemoryStats()
	assert.Equal(t, pc, st.CachedPinned)

	require.NoError(t, b.Trim())
	dc, pc = b.MemoryStats().CachedDevice, b.MemoryStats().CachedPinned
	assert.Zero(t, dc)
	assert.Zero(t, pc)
	st = requireDeviceHoldsReserved(t, b, dev)
	assert.Equal(t, st.Reserved, dev.Live().DeviceBytes)
	assert.Zero(t, dev.Live().PinnedBytes, "no pinned staging is held after Trim")
	got, err := b.Download(keep.All(), nil)
	require.NoError(t, err, "Trim never touches live buffers")
	assert.Len(t, got, 5000)
	require.NoError(t, b.Trim(), "Trim of empty caches is a no-op")

	require.NoError(t, b.Free(keep))
	require.NoError(t, b.Close())
	requireKind(t, b.Trim(), core.ErrClosed)
	sim.RequireNoLeaks(t, dev)
}

func TestTrimReportsAFailedFreeAndKeepsTheBlock(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	h, err := b.Alloc(4096)
	require.NoError(t, err)
	require.NoError(t, b.Free(h))
	dev.FailNth(sim.OpMemFree, 1, cudaapi.CUDA_ERROR_UNKNOWN)
	err = b.Trim()
	requireKind(t, err, core.ErrDriver, "MemFree")
	dc := b.MemoryStats().CachedDevice
	assert.Equal(t, uint64(4096), dc, "the block the driver refused to free stays cached")
	requireDeviceHoldsReserved(t, b, dev)
	require.NoError(t, b.Trim())
	dc = b.MemoryStats().CachedDevice
	assert.Zero(t, dc)
}

// An asynchronous upload's buffer is in flight: Trim leaves it and its
// staging alone.
func TestTrimLeavesWorkInFlightAlone(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	h, err := b.Alloc(1 << 16)
	require.NoError(t, err)
	pb, err := b.AllocHostPinned(1 << 16)
	require.NoError(t, err)
	require.NoError(t, b.UploadAsync(core.UploadAt{Buf: h, Offset: 0, Data: pb.Bytes()}))
	require.NoError(t, b.Trim())
	requireDeviceHoldsReserved(t, b, dev)
	assert.Equal(t, uint64(1<<16), b.MemoryStats().Allocated)
	require.NoError(t, b.SynchronizeUploads())
	require.NoError(t, b.Free(h))
	require.NoError(t, pb.Free())
}

func TestMemoryStatsCountsAndPeaks(t *testing.T) {
	b, dev := openSim(t, sim.Config{TotalMemory: 1 << 30})
	st := b.MemoryStats()
	assert.Equal(t, core.MemoryStats{Budget: 9 * (1 << 30) / 10, DeviceCacheCap: core.DeviceCacheCap(1 << 30), PinnedCacheCap: core.PinnedCacheCap(1 << 30)}, st)

	h1, err := b.Alloc(1000)
	require.NoError(t, err)
	h2, err := b.Alloc(3000)
	require.NoError(t, err)
	require.NoError(t, b.Free(h1))
	h3, err := b.Alloc(1000) // a hit
	require.NoError(t, err)
	st = requireDeviceHoldsReserved(t, b, dev)
	assert.Equal(t, uint64(4000), st.Allocated)
	assert.Equal(t, uint64(4000), st.PeakAllocated)
	assert.Equal(t, uint64(1024+3072), st.Reserved)
	assert.Equal(t, uint64(2), st.DeviceAllocs)
	assert.Equal(t, dev.Calls(sim.OpMemAlloc), st.DeviceAllocs)
	assert.Zero(t, st.DeviceFrees)
	assert.Equal(t, uint64(1), st.CacheHits)
	assert.Equal(t, uint64(2), st.CacheMisses)
	assert.Equal(t, dev.Calls(sim.OpMemGetInfo), st.FreeMemoryReads, "free memory is read once per miss, never on a hit")

	require.NoError(t, b.Free(h2))
	require.NoError(t, b.Free(h3))
	st = b.MemoryStats()
	assert.Zero(t, st.Allocated)
	assert.Equal(t, uint64(4000), st.PeakAllocated)
	b.ResetPeakMemoryStats()
	st = b.MemoryStats()
	assert.Zero(t, st.PeakAllocated)
	assert.Equal(t, st.Reserved, st.PeakReserved)

	// A refusal counts as an OOM, and its error says what was cached,
	// released and missing.
	_, err = b.Alloc(1 << 30)
	requireKind(t, err, core.ErrBudget, "4096 cached", "4096 released", "still missing")
	st = b.MemoryStats()
	assert.Equal(t, uint64(1), st.OOMs)
	assert.Equal(t, uint64(1), st.AllocRetries)
	assert.Equal(t, uint64(4096), st.ReleasedBytes)
	assert.Equal(t, dev.Calls(sim.OpMemFree), st.DeviceFrees)
	requireDeviceHoldsReserved(t, b, dev)

	require.NoError(t, b.Close())
	st = b.MemoryStats()
	assert.Zero(t, st.Reserved+st.CachedDevice+st.CachedPinned+st.Allocated)
	var nilB *core.Backend
	assert.Equal(t, core.MemoryStats{}, nilB.MemoryStats())
	nilB.ResetPeakMemoryStats()
	requireKind(t, nilB.Trim(), core.ErrInvalidArgument, "nil")
}

func TestCacheCapsFollowDeviceMemory(t *testing.T) {
	for _, total := range []uint64{1 << 20, 1 << 30, 80 << 30} {
		assert.GreaterOrEqual(t, core.DeviceCacheCap(total), total/4)
		assert.GreaterOrEqual(t, core.ResidentClassLimit(total), 64<<20)
		assert.LessOrEqual(t, core.PinnedCacheCap(total), uint64(1<<30))
	}
	assert.Equal(t, uint64(20<<30), core.DeviceCacheCap(80<<30))
	assert.Equal(t, 1280<<20, core.ResidentClassLimit(80<<30))
	b, _ := openSim(t, sim.Config{TotalMemory: 1 << 30}, core.WithDevicePoolCap(0))
	h, err := b.Alloc(100)
	require.NoError(t, err)
	require.NoError(t, b.Free(h))
	dc := b.MemoryStats().CachedDevice
	assert.Zero(t, dc, "a zero cap caches nothing")
	assert.Zero(t, b.MemoryStats().Reserved)
}

// Pinned buffers of the caller are not the staging cache: Trim leaves them.
func TestTrimKeepsCallerPinnedBuffers(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	pb, err := b.AllocHostPinned(4096)
	require.NoError(t, err)
	require.NoError(t, b.Trim())
	assert.Equal(t, uint64(4096), dev.Live().PinnedBytes)
	require.NoError(t, pb.Free())
}

// BenchmarkW4BSim is workload W4B on sim: a 4 KiB Alloc and
// Free pair through the Backend's cache.
func BenchmarkW4BSim(b *testing.B) {
	be, _ := openSim(b, sim.Config{TotalMemory: 1 << 30})
	h, err := be.Alloc(4 << 10)
	require.NoError(b, err)
	require.NoError(b, be.Free(h))
	b.ReportAllocs()
	for b.Loop() {
		h, err := be.Alloc(4 << 10)
		if err != nil {
			b.Fatal(err)
		}
		if err := be.Free(h); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkChurnSim is the churn workload on sim: 20,000 allocations and
// frees of log-uniform random sizes from 1 byte to 4 MiB; ns/op is per
// 20,000-step run (divide by 20,000 for a step).
func BenchmarkChurnSim(b *testing.B) {
	be, _ := openSim(b, sim.Config{TotalMemory: 8 << 30})
	steps := churn.Steps(churn.DefaultSteps, 1, churn.DefaultMaxSize, churn.DefaultMaxLive)
	live := make([]core.Buffer, 0, churn.DefaultMaxLive)
	var err error
	run := func() {
		if live, err = churn.Run(steps, live, be.Alloc, be.Free); err != nil {
			b.Fatal(err)
		}
	}
	run() // warm the cache
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		run()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/churn.DefaultSteps, "ns/step")
}
