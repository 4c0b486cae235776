package hostmem

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

func TestStagingTakeGivesExactPinnedSlicesAndReleaseReturnsThemAll(t *testing.T) {
	dev := newHost()
	pool := newPool(dev, 1<<20, nil)
	st := NewStaging(pool)

	sizes := []int{1, 100, 4096, 5000, 100}
	for i, n := range sizes {
		buf, err := st.Slice("Upload", n)
		require.NoError(t, err)
		assert.Len(t, buf, n)
		assert.Equal(t, n, cap(buf), "appending must never spill into pool memory")
		buf[0], buf[n-1] = byte(i), byte(i)
	}
	assert.Equal(t, len(sizes), st.Len())
	assert.Zero(t, pool.CachedBytes())
	want := uint64(1 + 128 + 4096 + 8192 + 128)
	assert.Equal(t, want, pool.ReservedBytes())

	st.ReturnAll()
	assert.Zero(t, st.Len())
	assert.Equal(t, want, pool.CachedBytes(), "every block went back to the pool")
	st.ReturnAll() // idempotent
	assert.Equal(t, want, pool.CachedBytes())
	assert.Zero(t, dev.Count(opHostFree))

	// A second call through a fresh staging is served from the pool.
	st2 := NewStaging(pool)
	for _, n := range sizes {
		_, err := st2.Slice("Upload", n)
		require.NoError(t, err)
	}
	assert.Equal(t, uint64(len(sizes)), dev.Count(opHostAlloc))
	st2.ReturnAll()

	require.NoError(t, pool.Close())
	requireNoLive(t, dev)
}

func TestStagingFailedTakeKeepsWhatItHadAndReleasesIt(t *testing.T) {
	cases := []struct {
		name string
		arm  func(*fakeHost)
		n    int
		kind error
	}{
		{"zero bytes", func(*fakeHost) {}, 0, errs.ErrInvalidArgument},
		{"negative", func(*fakeHost) {}, -3, errs.ErrInvalidArgument},
		{"driver failure", func(d *fakeHost) { d.FailNth(opHostAlloc, 1, cudaapi.CUDA_ERROR_OUT_OF_MEMORY) }, 64, errs.ErrDriver},
		{"null success", func(d *fakeHost) { d.NullNth(opHostAlloc, 1) }, 64, errs.ErrDriver},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dev := newHost()
			pool := newPool(dev, 1<<20, nil)
			st := NewStaging(pool)
			for range 5 { // more than the inline blocks
				_, err := st.Slice("Read", 32)
				require.NoError(t, err)
			}
			c.arm(dev)
			buf, err := st.Slice("Read", c.n)
			requireErrKind(t, err, c.kind, "Read")
			assert.Nil(t, buf)
			assert.Equal(t, 5, st.Len())
			st.ReturnAll()
			assert.Equal(t, uint64(5*32), pool.CachedBytes())
			assert.Equal(t, pool.CachedBytes(), pool.ReservedBytes())
			require.NoError(t, pool.Close())
			requireNoLive(t, dev)
		})
	}
}

func TestStagingOnAClosedPoolFailsAndLeaksNothing(t *testing.T) {
	dev := newHost()
	pool := newPool(dev, 1<<20, nil)
	st := NewStaging(pool)
	_, err := st.Slice("Upload", 10)
	require.NoError(t, err)
	require.NoError(t, pool.Close())
	_, err = st.Slice("Upload", 10)
	requireErrKind(t, err, errs.ErrClosed)
	st.ReturnAll() // the block taken before close is freed for real
	assert.Zero(t, pool.ReservedBytes())
	requireNoLive(t, dev)
}

func TestStagingTakeUploadCopiesAndZeroesThePadding(t *testing.T) {
	dev := newHost()
	pool := newPool(dev, 1<<20, nil)

	// Dirty a 16-byte block so the padding must be cleared, not inherited.
	st := NewStaging(pool)
	dirty, err := st.Slice("x", 16)
	require.NoError(t, err)
	for i := range dirty {
		dirty[i] = 0xEE
	}
	st.ReturnAll()

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
		st := NewStaging(pool)
		buf, err := st.Padded("Upload", c.data, c.n)
		require.NoError(t, err, c.name)
		assert.Equal(t, c.want, buf, c.name)
		st.ReturnAll()
	}

	st = NewStaging(pool)
	buf, err := st.Padded("Upload", []byte{1, 2, 3}, 2)
	requireErrKind(t, err, errs.ErrInvalidArgument, "padded upload length 2 is smaller than the 3 bytes of data")
	assert.Nil(t, buf)
	_, err = st.Padded("Upload", nil, 0)
	requireErrKind(t, err, errs.ErrInvalidArgument, "request of 0 bytes")
	assert.Zero(t, st.Len())
	st.ReturnAll()
	require.NoError(t, pool.Close())
	requireNoLive(t, dev)
}

// TestStagingDetachAndEvictLaterLeaveItEmpty: Detach hands the blocks to
// the caller, who returns them; EvictLater hands them to an eviction job,
// which returns them once evicted. Either way ReturnAll then gives nothing
// back twice.
func TestStagingDetachAndEvictLaterLeaveItEmpty(t *testing.T) {
	dev := newHost()
	evicted := 0
	pool := New(dev, Config{Cap: 1 << 20, Helpers: goHelpers{}, EvictHook: func(part []byte) { evicted += len(part) }})
	st := NewStaging(pool)
	a, err := st.Slice("Read", 100)
	require.NoError(t, err)
	_, err = st.Slice("Read", 5000)
	require.NoError(t, err)
	require.Len(t, st.Blocks(), 2)
	assert.Equal(t, 128, st.Blocks()[0].Size())
	assert.Equal(t, 8192, st.Blocks()[1].Size())
	assert.Same(t, &a[0], &st.Blocks()[0].Bytes()[0])

	blocks := st.Detach()
	assert.Zero(t, st.Len())
	st.ReturnAll()
	assert.Zero(t, pool.CachedBytes(), "ReturnAll gave back detached blocks")
	for _, b := range blocks {
		pool.Return(b)
	}
	assert.Equal(t, uint64(128+8192), pool.CachedBytes())

	data, err := st.Slice("Read", 8192)
	require.NoError(t, err)
	st.EvictLater([][]byte{data[:3000]}, 2, -1)
	assert.Zero(t, st.Len())
	st.ReturnAll()
	assert.Equal(t, uint64(128+8192), pool.CachedBytes(), "the evicted block is back, once")
	assert.Equal(t, 3000, evicted)
	require.NoError(t, pool.Close())
	requireNoLive(t, dev)
}
