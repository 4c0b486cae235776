package hostmem

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/cudaapi"
)

// spareRounds plays back-to-back readbacks on a pinned pool: each round
// takes k blocks of size bytes and hands them to an eviction job that is
// still running when the next round starts (every part sleeps). It returns
// the HostAllocs of each round.
func spareRounds(t *testing.T, p *Pool, dev *fakeHost, rounds, k, size int) []uint64 {
	t.Helper()
	var allocs []uint64
	for range rounds {
		before := dev.Count(opHostAlloc)
		blocks := make([]Block, k)
		for i := range blocks {
			b, err := p.Lend("test", size)
			require.NoError(t, err)
			blocks[i] = b
		}
		evictAll(p, blocks)
		allocs = append(allocs, dev.Count(opHostAlloc)-before)
	}
	return allocs
}

// evictAll hands blocks to an eviction job that evicts all of each block,
// on one helper beside the goroutines that wait for it.
func evictAll(p *Pool, blocks []Block) {
	regions := make([][]byte, len(blocks))
	for i, b := range blocks {
		regions[i] = b.buf
	}
	p.EvictLater(blocks, regions, 2, -1)
}

// slowPool returns a pool over dev caching at most maxCached bytes whose
// evictions take d for every part, and the count of parts evicted.
func slowPool(dev *fakeHost, maxCached uint64, d time.Duration) (*Pool, *atomic.Int64) {
	parts := new(atomic.Int64)
	p := New(dev, Config{Cap: maxCached, Helpers: goHelpers{}, EvictHook: func([]byte) {
		parts.Add(1)
		time.Sleep(d)
	}})
	return p, parts
}

// TestHostPoolSpareSetForBackToBackReadbacks: gets that find their bucket's
// blocks still being evicted wait for them (no allocation); once the
// bucket has waited twice it gets a second set, allocated in the
// background, and never more than that: however many rounds follow, the
// pool holds at most two sets. After the evictions end, every block is
// cached and a get allocates nothing.
func TestHostPoolSpareSetForBackToBackReadbacks(t *testing.T) {
	const k, size = 3, 64 << 10
	dev := newHost()
	p, _ := slowPool(dev, 64<<20, 2*time.Millisecond) // each round's eviction outlasts the next round's gets
	allocs := spareRounds(t, p, dev, 3, k, size)
	assert.Equal(t, []uint64{k, 0, 0}, allocs, "cold round, then two rounds that wait")
	p.settleEvictions() // and any spare still being allocated
	assert.Equal(t, uint64(k), dev.Count(opHostAlloc), "a spare before the bucket had waited twice")
	spareRounds(t, p, dev, 7, k, size)
	p.settleEvictions()
	total := dev.Count(opHostAlloc)
	assert.Greater(t, total, uint64(k), "no spare set for back-to-back rounds")
	assert.LessOrEqual(t, total, uint64(2*k), "more than two sets")

	assert.Equal(t, p.ReservedBytes(), p.CachedBytes(), "every block is back in the cache")
	before := dev.Count(opHostAlloc)
	b, err := p.Lend("test", size)
	require.NoError(t, err)
	assert.Equal(t, before, dev.Count(opHostAlloc), "a get after the evictions allocated")
	p.Return(b)
	require.NoError(t, p.Close())
	requireNoLive(t, dev)
}

// TestHostPoolSpareSetStaysWithinTheCap: a pool whose cache cap holds one
// set only never allocates a spare: its gets wait for the evictions.
func TestHostPoolSpareSetStaysWithinTheCap(t *testing.T) {
	const k, size = 3, 64 << 10
	dev := newHost()
	p, parts := slowPool(dev, k*size, 200*time.Microsecond)
	spareRounds(t, p, dev, 8, k, size)
	p.settleEvictions()
	assert.Equal(t, uint64(k), dev.Count(opHostAlloc), "a spare set past the cap")
	assert.Equal(t, int64(8*k*size/(16<<10)), parts.Load(), "every block of every round evicted")
	require.NoError(t, p.Close())
	requireNoLive(t, dev)
}

// TestHostPoolSpareFailuresLeaveNothingBehind: spare allocations that the
// driver refuses are dropped: the rounds still get their blocks (by
// waiting), the pool's accounting stays exact, and Close frees everything.
func TestHostPoolSpareFailuresLeaveNothingBehind(t *testing.T) {
	const k, size = 3, 64 << 10
	dev := newHost()
	p, _ := slowPool(dev, 64<<20, 200*time.Microsecond)
	first := spareRounds(t, p, dev, 1, k, size)
	require.Equal(t, []uint64{k}, first)
	dev.FailAll(opHostAlloc, cudaapi.CUDA_ERROR_UNKNOWN)
	spareRounds(t, p, dev, 8, k, size)
	p.settleEvictions()
	assert.Greater(t, dev.Count(opHostAlloc), uint64(k), "no spare was tried")
	assert.Equal(t, uint64(k*size), p.ReservedBytes(), "only the first round's blocks are allocated")
	assert.Equal(t, p.ReservedBytes(), p.CachedBytes())
	dev.FailAll(opHostAlloc, 0)
	require.NoError(t, p.Close())
	requireNoLive(t, dev)
}

// TestHostPoolSpareOfTheWrongLengthIsFreed: a spare block the driver hands
// back longer or shorter than asked is not used, and is freed at once
// rather than left allocated and uncounted: the pool's accounting holds
// only its real blocks, and after Close the driver holds nothing.
func TestHostPoolSpareOfTheWrongLengthIsFreed(t *testing.T) {
	const k, size = 2, 64 << 10
	for _, extra := range []int64{-1, 4096} {
		dev := newHost()
		p := New(dev, Config{Cap: 64 << 20, Helpers: goHelpers{}})
		blocks := make([]Block, k)
		for i := range blocks {
			b, err := p.Lend("test", size)
			require.NoError(t, err)
			blocks[i] = b
		}
		for _, b := range blocks {
			p.Return(b)
		}
		dev.extra.Store(extra)
		allocs, frees := dev.Count(opHostAlloc), dev.Count(opHostFree)
		p.pinSpares(bitsIndex(size), size, k)
		require.Greater(t, dev.Count(opHostAlloc), allocs, "extra %d: no spare was tried", extra)
		assert.Equal(t, dev.Count(opHostAlloc)-allocs, dev.Count(opHostFree)-frees,
			"extra %d: every spare of the wrong length is freed", extra)
		assert.Equal(t, uint64(k*size), p.ReservedBytes(), "extra %d", extra)
		assert.Equal(t, p.ReservedBytes(), p.CachedBytes(), "extra %d", extra)
		dev.extra.Store(0)
		require.NoError(t, p.Close())
		requireNoLive(t, dev)
	}
}
