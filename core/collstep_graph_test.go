package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// captureRanks captures every rank's training step into a Graph, closed
// by the test's cleanup when the test has not closed it.
func captureRanks(t *testing.T, ranks []*trainRank) []*core.Graph {
	t.Helper()
	graphs := make([]*core.Graph, len(ranks))
	errs := onRanks(t, len(ranks), "the ranks' captures", func(r int) error { // with collective checks, they exchange
		var err error
		graphs[r], err = ranks[r].b.Capture(ranks[r].batch())
		return err
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	t.Cleanup(func() {
		for _, g := range graphs {
			_ = g.Close() // ErrClosed when the test closed it
		}
	})
	return graphs
}

// TestCaptureTrainingStepReplaysWithNewInputs: each rank captures its
// training step once; replays (Replay and ReplayAsync, one goroutine per
// rank) run the recorded all-reduce again with the inputs of that moment.
// Comm.Close refuses while a Graph holds the Comm.
func TestCaptureTrainingStepReplaysWithNewInputs(t *testing.T) {
	const n = 2
	g, m, ranks := openTrain(t, n, 500)
	graphs := captureRanks(t, ranks)
	for r := range ranks {
		assert.Zero(t, m.Device(r).Calls(sim.OpGraphLaunch), "Capture runs nothing")
	}
	for k := 0; k < 5; k++ {
		want := fillInputs(ranks, k)
		outs := make([][]byte, n)
		errs := onRanks(t, n, "the ranks' replays", func(r int) error {
			ranks[r].b.ResetTelemetry()
			if k%2 == 0 {
				out, err := graphs[r].Replay(nil)
				if err == nil {
					outs[r] = out[0]
				}
				return err
			}
			p, err := graphs[r].ReplayAsync()
			if err != nil {
				return err
			}
			out, err := p.AwaitInto(nil)
			if err == nil {
				outs[r] = out[0]
			}
			return err
		})
		for r, err := range errs {
			require.NoError(t, err, "replay %d rank %d", k, r)
			assert.Equal(t, want, outs[r], "replay %d rank %d", k, r)
			assert.Equal(t, uint64(1), ranks[r].b.Telemetry().Collectives, "replay %d rank %d", k, r)
		}
	}
	comm := ranks[0].comm
	requireErrKind(t, comm.Close(), core.ErrInFlight, "Comm.Close", "1 open Graph(s)")
	requireErrKind(t, g.Close(), core.ErrInFlight)
	for _, gr := range graphs {
		require.NoError(t, gr.Close())
	}
	require.NoError(t, comm.Close())
	again, err := g.Comm(0)
	require.NoError(t, err)
	assert.NotSame(t, comm, again, "a rank closed: Group.Comm joins a new communicator")
}

// TestCollectiveReplayFailureAbortsEveryRank: a graph launch that fails on
// rank 0 aborts the communicator; rank 1's replay fails instead of
// waiting forever, both Graphs then refuse replays (ErrClosed), and the
// Group's next Comm works.
func TestCollectiveReplayFailureAbortsEveryRank(t *testing.T) {
	for _, o := range []sim.Op{sim.OpGraphLaunch, sim.OpStreamSynchronize} {
		g, m, ranks := openTrain(t, 2, 64)
		graphs := captureRanks(t, ranks)
		fillInputs(ranks, 0)
		m.Device(0).FailNth(o, 1, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
		errs := onRanks(t, 2, "replays after a failure", func(r int) error {
			_, err := graphs[r].Replay(nil)
			return err
		})
		requireKind(t, errs[0], core.ErrDriver)
		if o == sim.OpGraphLaunch {
			require.Error(t, errs[1], "rank 1's part had no partner")
		}
		for r, gr := range graphs {
			_, err := gr.Replay(nil)
			requireErrKind(t, err, core.ErrClosed, "was aborted")
			require.NoError(t, gr.Close(), "%s rank %d", o, r)
			assert.Zero(t, ranks[r].b.LaunchResourceCounts().Leases)
		}
		c, err := g.Comm(0)
		require.NoError(t, err)
		assert.NotSame(t, ranks[0].comm, c)
	}
}

// TestRunContextCollectiveAbortsSoNoRankHangs: rank 1 never runs its
// batch. Rank 0's deadline aborts the communicator and drains the batch
// before RunContext returns: nothing stays in flight, the Comms of both
// ranks refuse calls, and the Group joins a new communicator that works.
func TestRunContextCollectiveAbortsSoNoRankHangs(t *testing.T) {
	g, m, ranks := openTrain(t, 2, 64)
	fillInputs(ranks, 0)
	errs := onRanks(t, 1, "rank 0's RunContext", func(int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		_, err := ranks[0].b.RunContext(ctx, ranks[0].batch(), nil)
		return err
	})
	requireErrKind(t, errs[0], core.ErrInFlight, "RunContext", "communicator was aborted", "drained")
	assert.ErrorIs(t, errs[0], context.DeadlineExceeded)
	assert.Zero(t, ranks[0].b.LaunchResourceCounts().Leases, "drained and released before it returned")
	assert.Equal(t, uint64(1), m.Device(0).Calls(sim.OpAllReduce))
	for _, tr := range ranks {
		requireErrKind(t, tr.comm.AllReduce(tr.g, tr.g, core.DataFloat32, core.ReduceSum), core.ErrClosed, "aborted")
	}
	for r, tr := range ranks {
		c, err := g.Comm(r) // the first call closes the old ranks and joins anew
		require.NoError(t, err)
		tr.comm = c
	}
	want := fillInputs(ranks, 1)
	errs = onRanks(t, 2, "batches on the new communicator", func(r int) error {
		out, err := ranks[r].b.Run(ranks[r].batch(), nil)
		if err == nil {
			assert.Equal(t, want, out[0], "rank %d", r)
		}
		return err
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}

	// A context done before the call queues nothing and aborts.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := ranks[0].b.RunContext(ctx, ranks[0].batch(), nil)
	requireErrKind(t, err, core.ErrInFlight, "nothing was queued", "were aborted")
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, uint64(2), m.Device(0).Calls(sim.OpAllReduce), "nothing queued")
	requireErrKind(t, ranks[1].comm.AllReduce(ranks[1].g, ranks[1].g, core.DataFloat32, core.ReduceSum), core.ErrClosed)
}

// TestAwaitContextAbandonsCollectiveWork: a Pending whose batch waits for
// a rank that never comes is abandoned when AwaitContext's context ends:
// the communicator is aborted, the work ends, and its Await and Close
// report and release it.
func TestAwaitContextAbandonsCollectiveWork(t *testing.T) {
	_, _, ranks := openTrain(t, 2, 64)
	fillInputs(ranks, 0)
	p, err := ranks[0].b.RunAsync(ranks[0].batch())
	require.NoError(t, err)
	requireErrKind(t, ranks[0].comm.Close(), core.ErrInFlight, "uncollected")
	errs := onRanks(t, 1, "rank 0's AwaitContext", func(int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		return p.AwaitContext(ctx)
	})
	requireErrKind(t, errs[0], core.ErrInFlight, "Pending.AwaitContext", "were aborted")
	assert.ErrorIs(t, errs[0], context.DeadlineExceeded)
	errs = onRanks(t, 1, "the abandoned Pending's Await", func(int) error { return p.Await() })
	requireErrKind(t, errs[0], core.ErrInFlight, "were aborted")
	_, err = p.AwaitInto(nil)
	requireErrKind(t, err, core.ErrInFlight)
	require.NoError(t, p.Close())
	assert.Zero(t, ranks[0].b.LaunchResourceCounts().Leases)
	require.NoError(t, ranks[0].comm.Close(), "collected: the Comm closes")
}

// TestReplayContextCollectiveAbortsSoNoRankHangs: a replay whose other
// rank never replays stops at the deadline with the communicator aborted;
// both Graphs then refuse replays and close cleanly.
func TestReplayContextCollectiveAbortsSoNoRankHangs(t *testing.T) {
	_, m, ranks := openTrain(t, 2, 64)
	graphs := captureRanks(t, ranks)
	fillInputs(ranks, 0)
	errs := onRanks(t, 1, "rank 0's ReplayContext", func(int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		_, err := graphs[0].ReplayContext(ctx, nil)
		return err
	})
	requireErrKind(t, errs[0], core.ErrInFlight, "Graph.ReplayContext", "communicator was aborted")
	assert.ErrorIs(t, errs[0], context.DeadlineExceeded)
	assert.Equal(t, uint64(1), m.Device(0).Calls(sim.OpGraphLaunch))
	for r, gr := range graphs {
		_, err := gr.Replay(nil)
		requireErrKind(t, err, core.ErrClosed, "was aborted")
		require.NoError(t, gr.Close(), "rank %d", r)
		assert.Zero(t, ranks[r].b.LaunchResourceCounts().Leases)
	}
}

// TestCaptureFailureAbortsTheCommunicator: a Capture that fails on rank 0
// after its collective step was checked aborts the communicator, since
// rank 1's graph would wait for rank 0's replays: rank 1's Graph refuses
// to replay, and both ranks leak nothing.
func TestCaptureFailureAbortsTheCommunicator(t *testing.T) {
	for _, o := range []sim.Op{sim.OpStreamEndCapture, sim.OpGraphInstantiate} {
		_, m, ranks := openTrain(t, 2, 64)
		// Rank 1 captures first (without collective checks a capture
		// exchanges nothing), then rank 0 fails.
		g1, err := ranks[1].b.Capture(ranks[1].batch())
		require.NoError(t, err)
		m.Device(0).FailNth(o, 1, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
		_, err = ranks[0].b.Capture(ranks[0].batch())
		requireKind(t, err, core.ErrDriver)
		errs := onRanks(t, 1, "rank 1's replay", func(int) error { _, err := g1.Replay(nil); return err })
		requireErrKind(t, errs[0], core.ErrClosed, "was aborted")
		require.NoError(t, g1.Close())
		requireErrKind(t, ranks[0].comm.AllReduce(ranks[0].g, ranks[0].g, core.DataFloat32, core.ReduceSum), core.ErrClosed)
		assert.Zero(t, m.Device(0).Live().Graphs, "%s: the failed capture left no graph", o)
	}
}
