package core_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// spareRounds plays back-to-back readbacks on a pinned pool: each round
// takes k blocks of size bytes and hands them to an eviction job that is
// still running when the next round starts (every part sleeps). It returns
// the HostAllocs of each round.
func spareRounds(t *testing.T, p *core.HostPool, dev *sim.Device, rounds, k, size int) []uint64 {
	t.Helper()
	var allocs []uint64
	for range rounds {
		before := dev.Calls(sim.OpHostAlloc)
		blocks := make([]core.PinnedBlock, k)
		for i := range blocks {
			b, err := p.Get("test", size)
			require.NoError(t, err)
			blocks[i] = b
		}
		p.EvictLater(blocks...)
		allocs = append(allocs, dev.Calls(sim.OpHostAlloc)-before)
	}
	return allocs
}

// slowEvictions makes every part of a background eviction take d.
func slowEvictions(t *testing.T, d time.Duration) *atomic.Int64 {
	var parts atomic.Int64
	t.Cleanup(core.SetEvictHookForTest(func([]byte) {
		parts.Add(1)
		time.Sleep(d)
	}))
	return &parts
}

// TestHostPoolSpareSetForBackToBackReadbacks: gets that find their bucket's
// blocks still being evicted wait for them (no allocation); once the
// bucket has waited twice it gets a second set, allocated in the
// background, and never more than that: however many rounds follow, the
// pool holds at most two sets. After the evictions end, every block is
// cached and a get allocates nothing.
func TestHostPoolSpareSetForBackToBackReadbacks(t *testing.T) {
	const k, size = 3, 64 << 10
	slowEvictions(t, 2*time.Millisecond) // each round's eviction outlasts the next round's gets
	dev := newDev()
	p := core.NewHostPool(dev, 64<<20, nil)
	allocs := spareRounds(t, p, dev, 3, k, size)
	assert.Equal(t, []uint64{k, 0, 0}, allocs, "cold round, then two rounds that wait")
	p.SettleEvictions() // and any spare still being allocated
	assert.Equal(t, uint64(k), dev.Calls(sim.OpHostAlloc), "a spare before the bucket had waited twice")
	spareRounds(t, p, dev, 7, k, size)
	p.SettleEvictions()
	total := dev.Calls(sim.OpHostAlloc)
	assert.Greater(t, total, uint64(k), "no spare set for back-to-back rounds")
	assert.LessOrEqual(t, total, uint64(2*k), "more than two sets")

	assert.Equal(t, p.AllocatedBytes(), p.CachedBytes(), "every block is back in the cache")
	before := dev.Calls(sim.OpHostAlloc)
	b, err := p.Get("test", size)
	require.NoError(t, err)
	assert.Equal(t, before, dev.Calls(sim.OpHostAlloc), "a get after the evictions allocated")
	p.Put(b)
	require.NoError(t, p.Close())
	requireNoLive(t, dev)
}

// TestHostPoolSpareSetStaysWithinTheCap: a pool whose cache cap holds one
// set only never allocates a spare: its gets wait for the evictions.
func TestHostPoolSpareSetStaysWithinTheCap(t *testing.T) {
	const k, size = 3, 64 << 10
	parts := slowEvictions(t, 200*time.Microsecond)
	dev := newDev()
	p := core.NewHostPool(dev, k*size, nil)
	spareRounds(t, p, dev, 8, k, size)
	p.SettleEvictions()
	assert.Equal(t, uint64(k), dev.Calls(sim.OpHostAlloc), "a spare set past the cap")
	assert.Equal(t, int64(8*k*size/(16<<10)), parts.Load(), "every block of every round evicted")
	require.NoError(t, p.Close())
	requireNoLive(t, dev)
}

// TestHostPoolSpareFailuresLeaveNothingBehind: spare allocations that the
// driver refuses are dropped: the rounds still get their blocks (by
// waiting), the pool's accounting stays exact, and Close frees everything.
func TestHostPoolSpareFailuresLeaveNothingBehind(t *testing.T) {
	const k, size = 3, 64 << 10
	slowEvictions(t, 200*time.Microsecond)
	dev := newDev()
	p := core.NewHostPool(dev, 64<<20, quietLogger)
	first := spareRounds(t, p, dev, 1, k, size)
	require.Equal(t, []uint64{k}, first)
	dev.FailRate(1, 1, sim.OpHostAlloc)
	spareRounds(t, p, dev, 8, k, size)
	p.SettleEvictions()
	assert.Greater(t, dev.Calls(sim.OpHostAlloc), uint64(k), "no spare was tried")
	assert.Equal(t, uint64(k*size), p.AllocatedBytes(), "only the first round's blocks are allocated")
	assert.Equal(t, p.AllocatedBytes(), p.CachedBytes())
	dev.FailRate(1, 0, sim.OpHostAlloc)
	require.NoError(t, p.Close())
	requireNoLive(t, dev)
}
