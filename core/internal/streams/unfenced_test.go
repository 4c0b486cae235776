package streams_test

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/internal/streams"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// unfencedWork leases a stream of p, queues a memset of dst on it with its
// completion event after it, and gives it back unfenced.
func unfencedWork(t *testing.T, dev *sim.Device, p *streams.Pool, dst uint64, v byte) {
	t.Helper()
	l, err := p.Lease("test", false)
	require.NoError(t, err)
	require.NoError(t, dev.MemsetD8Async(dst, v, 64, l.Stream))
	require.NoError(t, dev.EventRecord(l.Done, l.Stream))
	require.NoError(t, p.ReturnUnfenced("test", l))
}

// TestLeasesAreOrderedAfterUnfencedWork: a lease taken after unfenced work
// runs after it: it takes the newest unfenced stream itself, and waits on
// the device for older unfenced work still running (the read sees the
// bytes), or recycles it once done; Settle and Close wait on the host.
func TestLeasesAreOrderedAfterUnfencedWork(t *testing.T) {
	dev := sim.New(sim.Config{TotalMemory: 1 << 20})
	p := streams.NewPool(dev, nil, streams.DefaultMaxIdle)
	mem, err := dev.MemAlloc(64)
	require.NoError(t, err)
	host, err := dev.HostAlloc(64)
	require.NoError(t, err)
	dev.HoldQueries(true) // the device reports queued work unfinished

	unfencedWork(t, dev, p, mem, 7)
	assert.Equal(t, 1, p.Counts().Unfenced)
	assert.Zero(t, p.Counts().Leases)
	waits := dev.Calls(sim.OpStreamWaitEvent)
	l, err := p.Lease("test", false)
	require.NoError(t, err)
	assert.Equal(t, waits, dev.Calls(sim.OpStreamWaitEvent), "the newest unfenced stream needs no wait")
	assert.Zero(t, p.Counts().Unfenced)
	require.NoError(t, dev.MemcpyDtoHAsync(host, mem, l.Stream))
	require.NoError(t, dev.StreamSynchronize(l.Stream))
	assert.Equal(t, byte(7), host[63])
	p.Return(l, true)

	// Two calls at once: the older one's work runs on another stream.
	a, err := p.Lease("test", false)
	require.NoError(t, err)
	c, err := p.Lease("test", false)
	require.NoError(t, err)
	require.NoError(t, dev.MemsetD8Async(mem, 9, 64, a.Stream))
	require.NoError(t, dev.EventRecord(a.Done, a.Stream))
	require.NoError(t, p.ReturnUnfenced("test", a))
	require.NoError(t, dev.EventRecord(c.Done, c.Stream))
	require.NoError(t, p.ReturnUnfenced("test", c))
	l, err = p.Lease("test", false)
	require.NoError(t, err)
	assert.Equal(t, c.Stream, l.Stream, "the newest unfenced stream")
	assert.Equal(t, waits+1, dev.Calls(sim.OpStreamWaitEvent), "a wait for the older one")
	require.NoError(t, dev.MemcpyDtoHAsync(host, mem, l.Stream))
	require.NoError(t, dev.StreamSynchronize(l.Stream))
	assert.Equal(t, byte(9), host[63], "the read ran after the older unfenced memset")
	p.Return(l, true)
	require.NoError(t, p.Settle("test"))

	dev.HoldQueries(false)
	for v := range byte(3) {
		unfencedWork(t, dev, p, mem, v) // each takes the last one's stream
	}
	assert.Equal(t, 1, p.Counts().Unfenced)
	unfencedWork(t, dev, p, mem, 3)
	require.NoError(t, p.Close(), "Close settles first")
	cn := p.Counts()
	assert.Equal(t, cn.Streams.Created, cn.Streams.Destroyed, "every stream destroyed")
	require.NoError(t, dev.MemFree(mem))
	require.NoError(t, dev.HostFree(unsafe.Pointer(&host[0])))
}

// TestUnfencedBoundAndFailures: past the bound the oldest unfenced lease
// is waited for; a failed query of an older one fails the lease, which
// takes nothing, and Settle recovers.
func TestUnfencedBoundAndFailures(t *testing.T) {
	dev := sim.New(sim.Config{TotalMemory: 1 << 20})
	p := streams.NewPool(dev, nil, streams.DefaultMaxIdle)
	ls := make([]*streams.Lease, 10)
	for i := range ls {
		l, err := p.Lease("test", false)
		require.NoError(t, err)
		ls[i] = l
	}
	for _, l := range ls {
		require.NoError(t, dev.EventRecord(l.Done, l.Stream))
		require.NoError(t, p.ReturnUnfenced("test", l))
	}
	assert.Equal(t, 8, p.Counts().Unfenced)
	dev.FailNth(sim.OpEventQuery, 1, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
	_, err := p.Lease("op", false)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "EventQuery")
	assert.Zero(t, p.Counts().Leases)
	require.NoError(t, p.Settle("test"))
	assert.Zero(t, p.Counts().Unfenced)
	require.NoError(t, p.Close())
	c := p.Counts()
	assert.Equal(t, c.Streams.Created, c.Streams.Destroyed)
}
