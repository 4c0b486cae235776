package core_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
)

// Buffers an OptimizerDispatcher owns (live ones and its static cache) are
// refused by Backend.Free with ErrOwned, and its pooled ones are under
// handles no caller holds, changing nothing: the cache keeps handing out
// live buffers and the dispatcher's Close frees everything.
func TestBackendFreeRefusesDispatcherBuffers(t *testing.T) {
	d, b, _ := openOpt(t)
	payload := []byte("static payload")

	set, err := d.AcquireStaticUploads(7, [][]byte{payload})
	require.NoError(t, err)
	require.NoError(t, d.ReleaseStaticUploads(set))
	err = b.Free(set.Bufs[0])
	require.ErrorIs(t, err, core.ErrOwned, "a cached static buffer")
	assert.Contains(t, err.Error(), "Free: owned by an optimizer dispatcher")

	again, err := d.AcquireStaticUploads(7, [][]byte{payload})
	require.NoError(t, err)
	assert.True(t, again.CacheHit)
	got, err := b.Download(again.Bufs[0].All(), nil)
	require.NoError(t, err, "the cache hit's buffer is live")
	assert.Equal(t, payload, got)
	require.NoError(t, d.ReleaseStaticUploads(again))

	live, err := d.Alloc(64)
	require.NoError(t, err)
	require.ErrorIs(t, b.Free(live), core.ErrOwned, "a live buffer")

	pooled, err := d.Alloc(32)
	require.NoError(t, err)
	require.NoError(t, d.Free(pooled))
	require.Equal(t, 1, d.Stats().PooledBuffers)
	require.ErrorIs(t, b.Free(pooled), core.ErrUnknownHandle, "a pooled buffer's old handle")

	// Nothing changed: the dispatcher still frees its live buffer, and Close
	// frees everything, returning the Backend's bytes to zero.
	require.NoError(t, d.Free(live))
	require.NoError(t, d.Close())
	assert.Zero(t, b.MemoryStats().Allocated)

	// A buffer of the Backend's own is unaffected.
	h, err := b.Alloc(16)
	require.NoError(t, err)
	require.NoError(t, b.Free(h))
}

// Once the Backend is closed (its buffers gone), the dispatcher refuses to
// free or pool buffers instead of handing them out again.
func TestDispatcherFreeAfterBackendClosed(t *testing.T) {
	d, b, _ := openOpt(t)
	id, err := d.Alloc(64)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	require.ErrorIs(t, d.Free(id), core.ErrClosed)
	assert.Zero(t, d.Stats().PooledBuffers)
}
