package core_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

func TestStagingTakeGivesExactPinnedSlicesAndReleaseReturnsThemAll(t *testing.T) {
	dev := newDev()
	pool := core.NewHostPool(dev, 1<<20, nil)
	st := core.NewStaging(pool)

	sizes := []int{1, 100, 4096, 5000, 100}
	for i, n := range sizes {
		buf, err := st.Take("Upload", n)
		require.NoError(t, err)
		assert.Len(t, buf, n)
		assert.Equal(t, n, cap(buf), "appending must never spill into pool memory")
		buf[0], buf[n-1] = byte(i), byte(i)
	}
	assert.Equal(t, len(sizes), st.Held())
	assert.Zero(t, pool.CachedBytes())
	want := uint64(1 + 128 + 4096 + 8192 + 128)
	assert.Equal(t, want, pool.AllocatedBytes())

	st.Release()
	assert.Zero(t, st.Held())
	assert.Equal(t, want, pool.CachedBytes(), "every block went back to the pool")
	st.Release() // idempotent
	assert.Equal(t, want, pool.CachedBytes())
	assert.Zero(t, dev.Calls(sim.OpHostFree))

	// A second call through a fresh staging is served from the pool.
	st2 := core.NewStaging(pool)
	for _, n := range sizes {
		_, err := st2.Take("Upload", n)
		require.NoError(t, err)
	}
	assert.Equal(t, uint64(len(sizes)), dev.Calls(sim.OpHostAlloc))
	st2.Release()

	require.NoError(t, pool.Close())
	requireNoLive(t, dev)
}

func TestStagingFailedTakeKeepsWhatItHadAndReleasesIt(t *testing.T) {
	cases := []struct {
		name string
		arm  func(*sim.Device)
		n    int
		kind error
	}{
		{"zero bytes", func(*sim.Device) {}, 0, core.ErrInvalidArgument},
		{"negative", func(*sim.Device) {}, -3, core.ErrInvalidArgument},
		{"driver failure", func(d *sim.Device) { d.FailNth(sim.OpHostAlloc, 1, cudaapi.CUDA_ERROR_OUT_OF_MEMORY) }, 64, core.ErrDriver},
		{"null success", func(d *sim.Device) { d.NullNth(sim.OpHostAlloc, 1) }, 64, core.ErrDriver},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dev := newDev()
			pool := core.NewHostPool(dev, 1<<20, nil)
			st := core.NewStaging(pool)
			for range 5 { // more than the inline blocks
				_, err := st.Take("Read", 32)
				require.NoError(t, err)
			}
			c.arm(dev)
			buf, err := st.Take("Read", c.n)
			requireErrKind(t, err, c.kind, "Read")
			assert.Nil(t, buf)
			assert.Equal(t, 5, st.Held())
			st.Release()
			assert.Equal(t, uint64(5*32), pool.CachedBytes())
			assert.Equal(t, pool.CachedBytes(), pool.AllocatedBytes())
			require.NoError(t, pool.Close())
			requireNoLive(t, dev)
		})
	}
}

func TestStagingOnAClosedPoolFailsAndLeaksNothing(t *testing.T) {
	dev := newDev()
	pool := core.NewHostPool(dev, 1<<20, nil)
	st := core.NewStaging(pool)
	_, err := st.Take("Upload", 10)
	require.NoError(t, err)
	require.NoError(t, pool.Close())
	_, err = st.Take("Upload", 10)
	requireErrKind(t, err, core.ErrClosed)
	st.Release() // the block taken before close is freed for real
	assert.Zero(t, pool.AllocatedBytes())
	requireNoLive(t, dev)
}
