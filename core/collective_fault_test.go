package core_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// TestCollectiveLeaseFailureOnAMiddleRankLeavesNothingInFlight: the stream
// lease of the middle rank of three fails (its Backend has no idle stream
// to reuse, and creating one fails). Nothing is queued, every rank's
// buffers can be freed at once, no lease is out, and the group works
// afterwards.
func TestCollectiveLeaseFailureOnAMiddleRankLeavesNothingInFlight(t *testing.T) {
	g, m := openMachine(t, 3, nil)
	bs := g.Backends()
	bufs := make([]core.Buffer, 3)
	for i, b := range bs {
		if i == 1 {
			var err error
			bufs[i], err = b.Alloc(8) // no upload: rank 1 has leased no stream yet
			require.NoError(t, err)
			continue
		}
		bufs[i] = putBytes(t, b, i32Bytes([]int32{1, 2}))
	}
	m.Device(1).FailNth(sim.OpStreamCreate, 1, cudaapi.CUDA_ERROR_OUT_OF_MEMORY)
	err := g.AllReduce(bufs, bufs, core.DataInt32, core.ReduceSum)
	requireKind(t, err, core.ErrDriver, "StreamCreate")
	for i, b := range bs {
		assert.Zero(t, m.Device(i).Calls(sim.OpAllReduce), "rank %d: nothing queued", i)
		assert.Zero(t, b.LaunchResourceCounts().Leases, "rank %d: no lease out", i)
	}
	require.NoError(t, g.AllReduce(bufs, bufs, core.DataInt32, core.ReduceSum), "the group works after the failure")
	for i, b := range bs {
		require.NoError(t, b.Free(bufs[i]), "rank %d: nothing left in flight", i)
	}
}

// TestPeerCopyStagedDestinationLeaseFailureReturnsTheSourceLease: a staged
// peer copy (no peer access) whose destination stream cannot be created
// gives back the stream and events it leased on the source, and the pinned
// staging it took, before it returns; both Backends then free their
// buffers and close with nothing live on either device.
func TestPeerCopyStagedDestinationLeaseFailureReturnsTheSourceLease(t *testing.T) {
	m, err := sim.NewMachine(sim.MachineConfig{Devices: 2, Peer: [][]bool{{true, false}, {false, true}}, Device: sim.Config{TotalMemory: 64 << 20}})
	require.NoError(t, err)
	g, err := core.OpenGroup(m.Drivers(), core.WithLogger(quietLogger))
	require.NoError(t, err)
	a, b := g.Backends()[0], g.Backends()[1]
	src := putBytes(t, a, bytes.Repeat([]byte{7}, 4096))
	dst, err := b.Alloc(4096) // no upload: b has no idle stream to reuse
	require.NoError(t, err)
	m.Device(1).FailNth(sim.OpStreamCreate, 1, cudaapi.CUDA_ERROR_OUT_OF_MEMORY)
	err = core.CopyPeer(b, a, []core.PeerCopy{{Dst: dst, Src: src, Len: 4096}})
	requireKind(t, err, core.ErrDriver, "StreamCreate")
	assert.Equal(t, uint64(1), m.Device(1).Calls(sim.OpStreamCreate), "the destination's lease was tried")
	for name, x := range map[string]*core.Backend{"source": a, "destination": b} {
		c := x.LaunchResourceCounts()
		assert.Zero(t, c.Leases, "%s: no lease out", name)
		assert.Equal(t, c.Streams.Created-c.Streams.Destroyed, uint64(c.Streams.Idle), "%s: every stream idle", name)
	}
	assert.Zero(t, m.Device(0).Calls(sim.OpMemcpyDtoHAsync), "nothing was queued")
	require.NoError(t, a.Free(src))
	require.NoError(t, b.Free(dst))
	require.NoError(t, g.Close())
	sim.RequireMachineNoLeaks(t, m)
}
