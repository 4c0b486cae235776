package collective_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/collective"
	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/core/internal/fakes"
	"github.com/vyre-go/vyrecuda/core/sim"
)

var sumArgs = collective.Args{Kind: collective.AllReduce, DT: driver.DataInt32, Red: driver.ReduceSum}

// runCtx runs an all-reduce of the rig's ranks with ctx.
func (r *rig) runCtx(ctx context.Context) error {
	a := sumArgs
	a.Ranks = len(r.ranks)
	return collective.Run(ctx, &collective.Call{Op: "Group.AllReduce", Args: a, Parts: r.parts(), Group: r.m.Device(0), Abort: r.abort})
}

// TestRunWithAContextPollsUntilDone: a context that can be done but is not
// waits by querying each stream, with one counted fence per device and the
// result in place.
func TestRunWithAContextPollsUntilDone(t *testing.T) {
	r := newRig(t, 2)
	for i := range r.ranks {
		r.buffers(t, i, i32s(int32(i+1)), 4)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	require.NoError(t, r.runCtx(ctx))
	for i, k := range r.ranks {
		assert.Equal(t, i32s(3), r.recv(t, i), "rank %d", i)
		assert.Equal(t, 1, k.fenced, "rank %d", i)
		assert.NotZero(t, k.dev.Calls(sim.OpStreamQuery), "rank %d: polled", i)
		assert.Zero(t, k.dev.Calls(sim.OpStreamSynchronize), "rank %d: never blocked", i)
	}
	r.requireReleased(t)
}

// TestRunStopsWaitingWhenTheContextIsDone: while the devices report the
// call unfinished, a deadline ends the wait: the communicators are
// aborted, every stream drained, every pin and lease given back, and the
// error is an ErrInFlight wrapping context.DeadlineExceeded.
func TestRunStopsWaitingWhenTheContextIsDone(t *testing.T) {
	r := newRig(t, 2)
	for i, k := range r.ranks {
		r.buffers(t, i, i32s(5), 4)
		k.dev.HoldQueries(true)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	err := r.runCtx(ctx)
	fakes.RequireErrKind(t, err, errs.ErrInFlight, "stopped waiting when the context was done", "communicator was aborted")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, 1, r.aborted)
	for i, k := range r.ranks {
		assert.Zero(t, k.fenced, "rank %d", i)
		assert.Zero(t, k.pool.Counts().Quarantined, "rank %d: drained", i)
		assert.Empty(t, k.held, "rank %d", i)
	}
	r.requireReleased(t)
}

// TestRunWithAContextDoneBeforeTheCall queues nothing and pins nothing; a
// call whose other ranks live elsewhere aborts, so they do not wait for it.
func TestRunWithAContextDoneBeforeTheCall(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := newRig(t, 2)
	for i := range r.ranks {
		r.buffers(t, i, i32s(5), 4)
	}
	err := r.runCtx(ctx)
	fakes.RequireErrKind(t, err, errs.ErrInFlight, "the context was done before the call; nothing was queued")
	assert.ErrorIs(t, err, context.Canceled)
	assert.NotContains(t, err.Error(), "aborted")
	assert.Zero(t, r.aborted)
	for i, k := range r.ranks {
		assert.Zero(t, k.pins, "rank %d", i)
		assert.Zero(t, k.dev.Calls(sim.OpStreamCreate), "rank %d", i)
	}

	one := newRig(t, 1)
	one.buffers(t, 0, i32s(5), 4)
	a := sumArgs
	a.Ranks = 2
	err = collective.Run(ctx, &collective.Call{Op: "Comm.AllReduce", Args: a, Parts: one.parts(), Abort: one.abort})
	fakes.RequireErrKind(t, err, errs.ErrInFlight, "the communicator was aborted")
	assert.Equal(t, 1, one.aborted)
	assert.Zero(t, one.ranks[0].pins)
}

// TestJoinStopsWhenTheContextIsDone: a join whose other rank never comes
// returns an ErrInFlight wrapping the context's error, through a driver
// that stops itself (the simulated device) and through one that only
// blocks, whose join goes on in the background and whose communicator is
// aborted once the missing rank arrives.
func TestJoinStopsWhenTheContextIsDone(t *testing.T) {
	for _, tc := range []struct {
		name string
		cd   func(d *sim.Device) driver.CollectiveDriver
	}{
		{"context joiner", func(d *sim.Device) driver.CollectiveDriver { return d }},
		{"blocking driver", func(d *sim.Device) driver.CollectiveDriver { return struct{ driver.CollectiveDriver }{d} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := sim.NewMachine(sim.MachineConfig{Devices: 2})
			require.NoError(t, err)
			d0, d1 := m.Device(0), m.Device(1)
			id, err := d0.NewCommID()
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
			defer cancel()
			c, err := collective.Join(ctx, "JoinCommContext", tc.cd(d0), id, 2, 0)
			assert.Nil(t, c)
			fakes.RequireErrKind(t, err, errs.ErrInFlight, "stopped waiting for the other ranks to join")
			assert.ErrorIs(t, err, context.DeadlineExceeded)

			// Rank 1 arrives late. Through the simulated device, rank 0 has
			// left: rank 1 waits alone until its own deadline. Through the
			// blocking driver, rank 0's join goes on in the background:
			// rank 1 meets it, and it aborts the communicator it got.
			_, stopsItself := tc.cd(d0).(driver.ContextJoiner)
			jctx := context.Background()
			if stopsItself {
				var jcancel context.CancelFunc
				jctx, jcancel = context.WithTimeout(context.Background(), 5*time.Millisecond)
				defer jcancel()
			}
			done := make(chan driver.Communicator)
			go func() {
				c, _ := collective.Join(jctx, "JoinCommContext", d1, id, 2, 1)
				done <- c
			}()
			var late driver.Communicator
			select {
			case late = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("rank 1's join did not return within 30 s")
			}
			assert.Equal(t, !stopsItself, late != nil, "rank 1 joined")
			if late != nil {
				require.Eventually(t, func() bool { return d0.Live().Communicators == 0 }, 30*time.Second, time.Millisecond,
					"the background join aborted its communicator")
				require.NoError(t, late.Destroy())
			}
			sim.RequireMachineNoLeaks(t, m)
		})
	}
}

// TestJoinReportsDriverFailures: a driver error keeps its code under the
// caller's op; a nil communicator with no error is a null success.
func TestJoinReportsDriverFailures(t *testing.T) {
	d := sim.New(sim.Config{})
	id, err := d.NewCommID()
	require.NoError(t, err)
	_, err = collective.Join(context.Background(), "JoinComm", d, id, 2, 5)
	fakes.RequireErrKind(t, err, errs.ErrDriver, "JoinComm", "JoinCommunicator failed")
	c, err := collective.Join(context.Background(), "JoinComm", nullJoiner{d}, id, 1, 0)
	assert.Nil(t, c)
	fakes.RequireErrKind(t, err, errs.ErrDriver, "null result")
	c, err = collective.Join(context.Background(), "JoinComm", d, id, 1, 0)
	require.NoError(t, err)
	require.NoError(t, c.Destroy())
	sim.RequireNoLeaks(t, d)
}

// nullJoiner joins nothing and reports success.
type nullJoiner struct{ driver.CollectiveDriver }

func (nullJoiner) JoinCommunicator(driver.CommID, int, int) (driver.Communicator, error) {
	return nil, nil
}
