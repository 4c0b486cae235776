package core_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
)

// Buffers an OptimizerDispatcher owns (live ids, its free pool, its static
// cache) are refused by Backend.FreeResident with ErrOwned, changing nothing:
// the cache keeps handing out live buffers and the dispatcher's Close frees
// everything.
func TestBackendFreeRefusesDispatcherBuffers(t *testing.T) {
	d, b, _ := openOpt(t)
	payload := []byte("static payload")

	set, err := d.AcquireStaticUploads(7, [][]byte{payload})
	require.NoError(t, err)
	require.NoError(t, d.ReleaseStaticUploads(set))
	err = b.FreeResident(set.Bufs[0])
	require.ErrorIs(t, err, core.ErrOwned, "a cached static buffer")
	assert.Contains(t, err.Error(), "FreeResident: owned by an optimizer dispatcher")

	again, err := d.AcquireStaticUploads(7, [][]byte{payload})
	require.NoError(t, err)
	assert.True(t, again.CacheHit)
	got, err := b.DownloadResident(again.Bufs[0])
	require.NoError(t, err, "the cache hit's buffer is live")
	assert.Equal(t, payload, got)
	require.NoError(t, d.ReleaseStaticUploads(again))

	live, err := d.AllocResident(64)
	require.NoError(t, err)
	liveBuf, err := d.Buffer(live)
	require.NoError(t, err)
	require.ErrorIs(t, b.FreeResident(liveBuf), core.ErrOwned, "a live id's buffer")

	pooled, err := d.AllocResident(32)
	require.NoError(t, err)
	pooledBuf, err := d.Buffer(pooled)
	require.NoError(t, err)
	require.NoError(t, d.FreeResident(pooled))
	require.Equal(t, 1, d.Stats().PooledBuffers)
	require.ErrorIs(t, b.FreeResident(pooledBuf), core.ErrOwned, "a pooled buffer")

	// Nothing changed: the dispatcher still frees its live id, and Close
	// frees everything, returning the Backend's bytes to zero.
	require.NoError(t, d.FreeResident(live))
	require.NoError(t, d.Close())
	assert.Zero(t, b.ResidentAllocatedBytes())

	// A buffer of the Backend's own is unaffected.
	h, err := b.AllocateResident(16)
	require.NoError(t, err)
	require.NoError(t, b.FreeResident(h))
}

// Once the Backend is closed (its buffers gone), the dispatcher refuses to
// free or pool ids instead of handing them out again.
func TestDispatcherFreeAfterBackendClosed(t *testing.T) {
	d, b, _ := openOpt(t)
	id, err := d.AllocResident(64)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	require.ErrorIs(t, d.FreeResident(id), core.ErrClosed)
	assert.Zero(t, d.Stats().PooledBuffers)
}
