package capture_test

import (
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/capture"
	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/core/internal/streams"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// TestReplayLandWaitsInsteadOfTheFence: a blocking replay given a Land
// runs it on the launch's lease after the launch and does not fence; the
// leases it took go back with the launch's. When it fails, Failing runs,
// every one of those streams is drained, no lease stays out, and the graph
// replays again.
func TestReplayLandWaitsInsteadOfTheFence(t *testing.T) {
	r := newRig(t, sim.Config{})
	g := record(t, r)
	rng := rand.New(rand.NewSource(8))
	var fail error
	land := func(l *streams.Lease) ([]*streams.Lease, error) {
		assert.Equal(t, uint64(1), r.dev.Calls(sim.OpGraphLaunch), "landing after the launch")
		extra, err := r.pool.Lease("Graph.Replay", false)
		require.NoError(t, err)
		require.NoError(t, r.dev.EventRecord(extra.Done, l.Stream))
		require.NoError(t, r.dev.EventSynchronize(extra.Done))
		return []*streams.Lease{extra}, fail
	}
	want := r.fill(rng)
	r.dev.ResetCalls()
	require.NoError(t, g.Replay("Graph.Replay", func() {}, land))
	assert.Equal(t, want, r.read(t))
	assert.Zero(t, r.dev.Calls(sim.OpStreamSynchronize), "the landing replaces the fence")
	assert.Zero(t, r.pool.Counts().Leases)

	fail = errs.New("Graph.Replay", errs.KindDriver, "landing failed", "fix")
	r.dev.ResetCalls()
	err := g.Replay("Graph.Replay", func() {}, land)
	require.ErrorIs(t, err, fail)
	assert.Equal(t, 1, r.failing)
	assert.Equal(t, uint64(2), r.dev.Calls(sim.OpStreamSynchronize), "both streams drained")
	assert.Zero(t, r.pool.Counts().Leases)
	require.NoError(t, g.Usable("Graph.Replay"))
	require.NoError(t, g.Destroy("Graph.Close"))
}

// TestLaunchQueuesAfter: an asynchronous launch queues Spec.After's work on
// its stream behind the graph, before the completion event; when After
// fails the launch fails with its call named, drained, nothing busy.
func TestLaunchQueuesAfter(t *testing.T) {
	r := newRig(t, sim.Config{})
	spec := r.spec(t)
	after := 0
	spec.After = func(s driver.Stream) (string, error) {
		after++
		assert.Equal(t, uint64(1), r.dev.Calls(sim.OpGraphLaunch), "After follows the launch")
		assert.Zero(t, r.dev.Calls(sim.OpEventRecord), "After precedes the completion event")
		return "MemcpyDtoHAsync", r.dev.MemsetD8Async(r.buf, 0x5c, 8, s)
	}
	g, err := capture.Record("Capture", r.device(), spec)
	require.NoError(t, err)
	want := r.fill(rand.New(rand.NewSource(2)))
	copy(want, []byte{0x5c, 0x5c, 0x5c, 0x5c, 0x5c, 0x5c, 0x5c, 0x5c})
	r.dev.ResetCalls()
	lease, err := g.Launch("Graph.ReplayAsync", false)
	require.NoError(t, err)
	require.NoError(t, r.dev.EventSynchronize(lease.Done))
	assert.Equal(t, want, r.read(t))
	r.pool.Return(lease, true)
	g.Collected()
	assert.Equal(t, 1, after)

	r.dev.ResetCalls()
	r.dev.FailNth(sim.OpMemsetD8Async, 1, cudaapi.CUDA_ERROR_UNKNOWN)
	lease, err = g.Launch("Graph.ReplayAsync", false)
	require.Nil(t, lease)
	require.ErrorIs(t, err, errs.ErrDriver)
	assert.Contains(t, err.Error(), "MemcpyDtoHAsync")
	assert.False(t, g.Busy())
	assert.Zero(t, r.pool.Counts().Leases)
	require.NoError(t, g.Destroy("Graph.Close"))
}
