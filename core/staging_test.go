package core_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

func TestDispatchAllocsGiveEverythingBackOnRelease(t *testing.T) {
	dev := newDev()
	pool := core.NewDevicePool(dev, 1<<30, 1<<20, nil)
	da := core.NewDispatchAllocs(pool)
	for _, n := range []int{16, 1000, 1000} {
		a, err := da.Take("Dispatch", n)
		require.NoError(t, err)
		assert.GreaterOrEqual(t, a.Size(), uint64(n))
	}
	// Out of memory with nothing cached to give back: a budget refusal.
	dev.FailNth(sim.OpMemAlloc, 1, cudaapi.CUDA_ERROR_OUT_OF_MEMORY)
	_, err := da.Take("Dispatch", 64)
	requireErrKind(t, err, core.ErrBudget, "Dispatch", "0 cached")
	dev.FailNth(sim.OpMemAlloc, 1, cudaapi.CUDA_ERROR_INVALID_VALUE)
	_, err = da.Take("Dispatch", 64)
	requireErrKind(t, err, core.ErrDriver, "Dispatch", "MemAlloc")
	_, err = da.Take("Dispatch", 0)
	requireErrKind(t, err, core.ErrInvalidArgument)
	assert.Equal(t, 3, da.Held())

	da.Release()
	da.Release()
	assert.Zero(t, da.Held())
	assert.Equal(t, uint64(16+1024+1024), pool.CachedBytes())
	assert.Equal(t, pool.CachedBytes(), pool.AllocatedBytes())
	require.NoError(t, pool.Close())
	requireNoLive(t, dev)
}
