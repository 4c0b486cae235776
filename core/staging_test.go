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

func TestStagingTakeUploadCopiesAndZeroesThePadding(t *testing.T) {
	dev := newDev()
	pool := core.NewHostPool(dev, 1<<20, nil)

	// Dirty a 16-byte block so the padding must be cleared, not inherited.
	st := core.NewStaging(pool)
	dirty, err := st.Take("x", 16)
	require.NoError(t, err)
	for i := range dirty {
		dirty[i] = 0xEE
	}
	st.Release()

	cases := []struct {
		name string
		data []byte
		n    int
		want []byte
	}{
		{"exact", []byte{1, 2, 3}, 3, []byte{1, 2, 3}},
		{"padded", []byte{1, 2, 3}, 10, []byte{1, 2, 3, 0, 0, 0, 0, 0, 0, 0}},
		{"all padding", nil, 5, []byte{0, 0, 0, 0, 0}},
	}
	for _, c := range cases {
		st := core.NewStaging(pool)
		buf, err := st.TakeUpload("Upload", c.data, c.n)
		require.NoError(t, err, c.name)
		assert.Equal(t, c.want, buf, c.name)
		st.Release()
	}

	st = core.NewStaging(pool)
	buf, err := st.TakeUpload("Upload", []byte{1, 2, 3}, 2)
	requireErrKind(t, err, core.ErrInvalidArgument, "padded upload length 2 is smaller than the 3 bytes of data")
	assert.Nil(t, buf)
	_, err = st.TakeUpload("Upload", nil, 0)
	requireErrKind(t, err, core.ErrInvalidArgument, "request of 0 bytes")
	assert.Zero(t, st.Held())
	st.Release()
	require.NoError(t, pool.Close())
	requireNoLive(t, dev)
}

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
