package devmem

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/internal/memhist"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// TestPoolReportsItsEventsToTheHistory: with a Recorder set, every block
// handed out and given back, a retry, a trim and a refusal are recorded
// with the pool's reserved bytes after each; with none, nothing is.
func TestPoolReportsItsEventsToTheHistory(t *testing.T) {
	dev := newDevice(10000)
	p := newPool(dev, 10000, 10000)        // budget 9000
	a, err := p.Alloc("Alloc", 1000, true) // class 1024, before recording
	require.NoError(t, err)
	require.NoError(t, p.Free("Free", a))
	assert.Nil(t, p.History())

	r := memhist.New(100, p.ReservedBytes)
	p.SetHistory(r)
	assert.Same(t, r, p.History())
	b, err := p.Alloc("Upload", 3000, true) // class 3072: a miss
	require.NoError(t, err)
	require.NoError(t, p.Free("Free", b))
	c, err := p.Alloc("Alloc", 7000, false) // 1024+3072 cached: short, released, retried
	require.NoError(t, err)
	_, err = p.Alloc("Alloc", 5000, false) // no room left even with the cache released
	require.Error(t, err)
	require.NoError(t, p.Free("Free", c))
	d, err := p.Alloc("Alloc", 100, true)
	require.NoError(t, err)
	require.NoError(t, p.Free("Free", d))
	require.NoError(t, p.Trim("Trim"))

	type ev struct {
		kind            string
		op              string
		requested, size uint64
		reserved        uint64
	}
	var got []ev
	for _, e := range r.Snapshot().Events {
		got = append(got, ev{e.Kind.String(), e.Op, e.Requested, e.Size, e.Reserved})
	}
	assert.Equal(t, []ev{
		{"alloc", "Upload", 3000, 3072, 1024 + 3072},
		{"free", "Free", 3000, 3072, 1024 + 3072},
		{"retry", "", 7000, 3072, 1024 + 7000}, // the smallest cached block that covers the shortfall
		{"alloc", "Alloc", 7000, 7000, 1024 + 7000},
		{"retry", "", 5000, 1024, 7000}, // the rest of the cache, in vain
		{"oom", "Alloc", 5000, 5000, 7000},
		{"free", "Free", 7000, 7000, 0},
		{"alloc", "Alloc", 100, 104, 104},
		{"free", "Free", 100, 104, 104},
		{"trim", "Trim", 0, 104, 0},
	}, got)

	p.SetHistory(nil)
	e, err := p.Alloc("Alloc", 10, true)
	require.NoError(t, err)
	require.NoError(t, p.Free("Free", e))
	assert.Len(t, r.Snapshot().Events, len(got), "off: nothing recorded")
	require.NoError(t, p.Close())
	requireNoLive(t, dev)
}

// A free the driver refuses is no free: the block stays live in the history.
func TestPoolHistoryKeepsABlockWhoseFreeFailed(t *testing.T) {
	dev := newDevice(1 << 20)
	p := newPool(dev, 1<<20, 0) // nothing cached: every free calls the driver
	r := memhist.New(10, nil)
	p.SetHistory(r)
	a, err := p.Alloc("Alloc", 64, true)
	require.NoError(t, err)
	dev.FailNth(opMemFree, 1, cudaapi.CUDA_ERROR_INVALID_VALUE)
	require.Error(t, p.Free("Free", a))
	s := r.Snapshot()
	assert.Len(t, s.Events, 1)
	require.Len(t, s.Live, 1)
	assert.Equal(t, a.Ptr(), s.Live[0].Addr)
	require.NoError(t, p.Free("Free", a))
	assert.Empty(t, r.Snapshot().Live)
	require.NoError(t, p.Close())
	requireNoLive(t, dev)
}
