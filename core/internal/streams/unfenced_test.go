package streams_test

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/internal/streams"
	"github.com/vyre-go/vyrecuda/core/sim"
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
// waits for it on the device while it runs (the read sees its bytes), and
// recycles it once it is done; Settle and Close wait for it on the host.
func TestLeasesAreOrderedAfterUnfencedWork(t *testing.T) {
	dev := sim.New(sim.Config{TotalMemory: 1 << 20})
	p := streams.NewPool(dev, nil, streams.DefaultMaxIdle)
	mem, err := dev.MemAlloc(64)
	require.NoError(t, err)
	host, err := dev.HostAlloc(64)
	require.NoError(t, err)

	dev.HoldQueries(true) // the device reports the work unfinished
	unfencedWork(t, dev, p, mem, 7)
	assert.Equal(t, 1, p.Counts().Unfenced)
	assert.Zero(t, p.Counts().Leases)
	waits := dev.Calls(sim.OpStreamWaitEvent)
	l, err := p.Lease("test", false)
	require.NoError(t, err)
	assert.Equal(t, waits+1, dev.Calls(sim.OpStreamWaitEvent), "the new stream waits for it")
	require.NoError(t, dev.MemcpyDtoHAsync(host, mem, l.Stream))
	require.NoError(t, dev.StreamSynchronize(l.Stream))
	assert.Equal(t, byte(7), host[63], "the read ran after the unfenced memset")
	p.Return(l, true)

	dev.HoldQueries(false) // a query now completes it: recycled, no wait
	waits = dev.Calls(sim.OpStreamWaitEvent)
	l, err = p.Lease("test", false)
	require.NoError(t, err)
	assert.Equal(t, waits, dev.Calls(sim.OpStreamWaitEvent))
	assert.Zero(t, p.Counts().Unfenced)
	p.Return(l, true)

	dev.HoldQueries(true)
	for v := range byte(12) { // past the bound: the oldest are settled
		unfencedWork(t, dev, p, mem, v)
	}
	assert.Equal(t, 8, p.Counts().Unfenced)
	require.NoError(t, p.Settle("test"))
	assert.Zero(t, p.Counts().Unfenced)
	unfencedWork(t, dev, p, mem, 3)
	require.NoError(t, p.Close(), "Close settles first")
	c := p.Counts()
	assert.Equal(t, c.Streams.Created, c.Streams.Destroyed, "every stream destroyed")
	require.NoError(t, dev.MemFree(mem))
	require.NoError(t, dev.HostFree(unsafe.Pointer(&host[0])))
}
