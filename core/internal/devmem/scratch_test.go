package devmem

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

func TestScratchGivesEverythingBackOnFreeAll(t *testing.T) {
	dev := newDevice(1 << 30)
	pool := newPool(dev, 1<<30, 1<<20)
	sc := NewScratch(pool)
	for _, n := range []int{16, 1000, 1000} {
		a, err := sc.Add("Dispatch", n)
		require.NoError(t, err)
		assert.GreaterOrEqual(t, a.Size(), uint64(n))
	}
	// Out of memory with nothing cached to give back: a budget refusal.
	dev.FailNth(opMemAlloc, 1, cudaapi.CUDA_ERROR_OUT_OF_MEMORY)
	_, err := sc.Add("Dispatch", 64)
	requireErrKind(t, err, errs.ErrBudget, "Dispatch", "0 cached")
	dev.FailNth(opMemAlloc, 1, cudaapi.CUDA_ERROR_INVALID_VALUE)
	_, err = sc.Add("Dispatch", 64)
	requireErrKind(t, err, errs.ErrDriver, "Dispatch", "MemAlloc")
	_, err = sc.Add("Dispatch", 0)
	requireErrKind(t, err, errs.ErrInvalidArgument)
	assert.Equal(t, 3, sc.Len())

	sc.FreeAll()
	sc.FreeAll()
	assert.Zero(t, sc.Len())
	assert.Equal(t, uint64(16+1024+1024), pool.CachedBytes())
	assert.Equal(t, pool.CachedBytes(), pool.ReservedBytes())
	require.NoError(t, pool.Close())
	requireNoLive(t, dev)
}
