package core_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// peerLinks are the machines of the peer-copy context tests: devices with
// peer access (direct copies) and without (staged through host memory).
var peerLinks = []struct {
	name string
	peer [][]bool
}{{"direct", nil}, {"staged", [][]bool{{true, false}, {false, true}}}}

// TestCopyPeerContextCopiesWithALiveContext: with a context that is not
// done, the copy lands and the call counts its fence, polling instead of
// blocking; a nil context is refused and one already done copies nothing.
func TestCopyPeerContextCopiesWithALiveContext(t *testing.T) {
	for _, link := range peerLinks {
		t.Run(link.name, func(t *testing.T) {
			g, m := openMachine(t, 2, link.peer)
			a, b := g.Backends()[0], g.Backends()[1]
			data := bytes.Repeat([]byte{5}, 1<<12)
			src := putBytes(t, a, data)
			dst := putBytes(t, b, make([]byte, 1<<12))
			copies := []core.PeerCopy{{Dst: dst, Src: src, Len: len(data)}}

			var nilCtx context.Context
			requireErrKind(t, core.CopyPeerContext(nilCtx, b, a, copies), core.ErrInvalidArgument, "context is nil")
			done, cancel := context.WithCancel(context.Background())
			cancel()
			err := core.CopyPeerContext(done, b, a, copies)
			requireErrKind(t, err, core.ErrInFlight, "CopyPeerContext", "nothing was copied")
			assert.ErrorIs(t, err, context.Canceled)
			assert.Equal(t, make([]byte, 1<<12), getBytes(t, b, dst))

			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			syncs := b.Telemetry().SyncPoints
			require.NoError(t, core.CopyPeerContext(ctx, b, a, copies))
			assert.Equal(t, syncs+1, b.Telemetry().SyncPoints, "one fence")
			assert.NotZero(t, m.Device(1).Calls(sim.OpStreamQuery), "waited by polling")
			assert.Equal(t, data, getBytes(t, b, dst))
			require.NoError(t, a.Free(src))
			require.NoError(t, b.Free(dst))
		})
	}
}

// TestCopyPeerContextDeadline: while the destination device reports the
// copy unfinished, a deadline returns an ErrInFlight wrapping
// context.DeadlineExceeded. The copy still lands; its buffers are released
// in the background (Free succeeds once it has), and both Backends close
// with nothing left on either device, also when the background wait fails
// on the device.
func TestCopyPeerContextDeadline(t *testing.T) {
	for _, link := range peerLinks {
		for _, failWait := range []bool{false, true} {
			name := link.name
			if failWait {
				name += " background wait fails"
			}
			t.Run(name, func(t *testing.T) {
				m, err := sim.NewMachine(sim.MachineConfig{Devices: 2, Peer: link.peer, Device: sim.Config{TotalMemory: 64 << 20}})
				require.NoError(t, err)
				g, err := core.OpenGroup(m.Drivers(), core.WithLogger(quietLogger))
				require.NoError(t, err)
				a, b := g.Backends()[0], g.Backends()[1]
				data := bytes.Repeat([]byte{9}, 1<<12)
				src := putBytes(t, a, data)
				dst := putBytes(t, b, make([]byte, 1<<12))
				m.Device(1).HoldQueries(true)
				if failWait {
					m.Device(1).FailNth(sim.OpStreamSynchronize, 1, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
				defer cancel()
				err = core.CopyPeerContext(ctx, b, a, []core.PeerCopy{{Dst: dst, Src: src, Len: len(data)}})
				requireErrKind(t, err, core.ErrInFlight, "CopyPeerContext", "the copy still runs")
				assert.ErrorIs(t, err, context.DeadlineExceeded)
				m.Device(1).HoldQueries(false)

				require.Eventually(t, func() bool { return a.Free(src) == nil }, 30*time.Second, time.Millisecond,
					"the source is released once the background wait is over")
				assert.Equal(t, data, getBytes(t, b, dst), "the copy landed before its buffers were released")
				require.NoError(t, b.Free(dst))
				for _, x := range []*core.Backend{a, b} {
					assert.Zero(t, x.LaunchResourceCounts().Leases)
					assert.Zero(t, x.LaunchResourceCounts().Quarantined)
				}
				require.NoError(t, g.Close())
				sim.RequireMachineNoLeaks(t, m)
			})
		}
	}
}

// TestCopyPeerContextCloseWaitsForTheBackgroundWait: Close of either
// Backend right after a cancelled wait waits for the copy to be collected,
// then closes with nothing left on the device.
func TestCopyPeerContextCloseWaitsForTheBackgroundWait(t *testing.T) {
	m, err := sim.NewMachine(sim.MachineConfig{Devices: 2, Device: sim.Config{TotalMemory: 64 << 20}})
	require.NoError(t, err)
	g, err := core.OpenGroup(m.Drivers(), core.WithLogger(quietLogger))
	require.NoError(t, err)
	a, b := g.Backends()[0], g.Backends()[1]
	src := putBytes(t, a, bytes.Repeat([]byte{3}, 256))
	dst := putBytes(t, b, make([]byte, 256))
	m.Device(1).HoldQueries(true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	err = core.CopyPeerContext(ctx, b, a, []core.PeerCopy{{Dst: dst, Src: src, Len: 256}})
	requireErrKind(t, err, core.ErrInFlight)
	require.NoError(t, g.Close(), "Close waits for the background wait, then frees the buffers")
	sim.RequireMachineNoLeaks(t, m)
}
