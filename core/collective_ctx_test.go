package core_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// TestGroupCollectivesRefuseRanksThatDisagree: buffers that each fit the
// collective on their own rank but differ across ranks (the 400-byte send
// on rank 0 and 200-byte one on rank 1 of an all-reduce) are refused
// before anything happens: no communicator is built, no stream leased,
// nothing queued, and every buffer can be freed at once.
func TestGroupCollectivesRefuseRanksThatDisagree(t *testing.T) {
	g, m := openMachine(t, 2, nil)
	bs := g.Backends()
	buf := func(r, n int) core.Buffer { return putBytes(t, bs[r], make([]byte, n)) }
	big, small := buf(0, 400), buf(1, 200)
	gather := []core.Buffer{buf(0, 16), buf(1, 8)}
	gathered := []core.Buffer{buf(0, 32), buf(1, 16)}
	before := [2]map[sim.Op]uint64{m.Device(0).CallCounts(), m.Device(1).CallCounts()}
	for _, tc := range []struct {
		name string
		err  error
		want []string
	}{
		{"all-reduce", g.AllReduce([]core.Buffer{big, small}, []core.Buffer{big, small}, core.DataFloat32, core.ReduceSum),
			[]string{"Group.AllReduce", "rank 0 has 100, rank 1 has 50 elements in send and recv"}},
		{"broadcast", g.Broadcast(0, big, []core.Buffer{big, small}, core.DataFloat32),
			[]string{"Group.Broadcast", "rank 0 has 100, rank 1 has 50 elements in recv"}},
		{"all-gather", g.AllGather(gather, gathered, core.DataInt32),
			[]string{"Group.AllGather", "rank 0 has 4, rank 1 has 2 elements in send"}},
		{"reduce-scatter", g.ReduceScatter(gathered, gather, core.DataInt32, core.ReduceMax),
			[]string{"Group.ReduceScatter", "rank 0 has 4, rank 1 has 2 elements in recv"}},
		{"context form", g.AllReduceContext(t.Context(), []core.Buffer{big, small}, []core.Buffer{big, small}, core.DataFloat32, core.ReduceSum),
			[]string{"Group.AllReduceContext", "rank 0 has 100, rank 1 has 50"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := requireErrKind(t, tc.err, core.ErrInvalidArgument, tc.want...)
			assert.Contains(t, e.Fix, "send = ranks x recv for ReduceScatter")
		})
	}
	for i := range bs {
		assert.Equal(t, before[i], m.Device(i).CallCounts(), "device %d: no driver call at all", i)
		assert.Zero(t, bs[i].LaunchResourceCounts().Leases)
	}
	for _, h := range []core.Buffer{big, gather[0], gathered[0]} {
		require.NoError(t, bs[0].Free(h), "nothing left in flight")
	}
	for _, h := range []core.Buffer{small, gather[1], gathered[1]} {
		require.NoError(t, bs[1].Free(h))
	}
}

// TestGroupCollectiveContextForms: with a live context each form gives the
// blocking form's result and counts one fence per device; a nil context
// is refused; a context already done builds, queues and pins nothing.
func TestGroupCollectiveContextForms(t *testing.T) {
	g, m := openMachine(t, 2, nil)
	bs := g.Backends()
	x := []core.Buffer{putBytes(t, bs[0], i32Bytes([]int32{1, 2})), putBytes(t, bs[1], i32Bytes([]int32{10, 20}))}
	y := []core.Buffer{putBytes(t, bs[0], make([]byte, 16)), putBytes(t, bs[1], make([]byte, 16))}
	z := []core.Buffer{putBytes(t, bs[0], make([]byte, 4)), putBytes(t, bs[1], make([]byte, 4))}

	done, cancel := context.WithCancel(context.Background())
	cancel()
	var nilCtx context.Context
	requireErrKind(t, g.AllReduceContext(nilCtx, x, x, core.DataInt32, core.ReduceSum), core.ErrInvalidArgument, "context is nil")
	err := g.AllReduceContext(done, x, x, core.DataInt32, core.ReduceSum)
	requireErrKind(t, err, core.ErrInFlight, "Group.AllReduceContext", "nothing was queued")
	assert.ErrorIs(t, err, context.Canceled)
	assert.Zero(t, m.Device(0).Calls(sim.OpNewCommunicators), "no communicator built for a call that cannot run")

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	sync0 := bs[0].Telemetry().SyncPoints
	require.NoError(t, g.AllReduceContext(ctx, x, x, core.DataInt32, core.ReduceSum))
	assert.Equal(t, sync0+1, bs[0].Telemetry().SyncPoints, "one fence counted on each device")
	require.NoError(t, g.AllGatherContext(ctx, x, y, core.DataInt32))
	require.NoError(t, g.ReduceScatterContext(ctx, x, z, core.DataInt32, core.ReduceSum))
	want := i32Bytes([]int32{11, 22, 11, 22})
	for r := range bs {
		assert.Equal(t, i32Bytes([]int32{11, 22}), getBytes(t, bs[r], x[r]), "rank %d all-reduce", r)
		assert.Equal(t, want, getBytes(t, bs[r], y[r]), "rank %d all-gather", r)
		assert.Equal(t, i32Bytes([]int32{22 * int32(r+1)}), getBytes(t, bs[r], z[r]), "rank %d reduce-scatter", r)
	}
	require.NoError(t, g.BroadcastContext(ctx, 1, z[1], z, core.DataInt32))
	for r := range bs {
		assert.Equal(t, i32Bytes([]int32{44}), getBytes(t, bs[r], z[r]), "rank %d broadcast", r)
		assert.NotZero(t, m.Device(r).Calls(sim.OpStreamQuery), "rank %d: waited by polling", r)
	}
}

// TestGroupCollectiveContextDeadline: while the devices report the call
// unfinished, a deadline ends the wait with an ErrInFlight wrapping
// context.DeadlineExceeded; the communicators are aborted and nothing
// stays in flight or leased, and the next collective builds new
// communicators and works.
func TestGroupCollectiveContextDeadline(t *testing.T) {
	g, m := openMachine(t, 2, nil)
	bs := g.Backends()
	x := []core.Buffer{putBytes(t, bs[0], i32Bytes([]int32{1})), putBytes(t, bs[1], i32Bytes([]int32{2}))}
	for i := range bs {
		m.Device(i).HoldQueries(true)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	err := g.AllReduceContext(ctx, x, x, core.DataInt32, core.ReduceSum)
	requireErrKind(t, err, core.ErrInFlight, "stopped waiting when the context was done", "aborted")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	for i, b := range bs {
		m.Device(i).HoldQueries(false)
		assert.Zero(t, b.LaunchResourceCounts().Leases, "rank %d", i)
		assert.Zero(t, m.Device(i).Live().Communicators, "rank %d: aborted", i)
	}
	require.NoError(t, g.AllReduce(x, x, core.DataInt32, core.ReduceMax))
	assert.Equal(t, uint64(2), m.Device(0).Calls(sim.OpNewCommunicators), "new communicators")
	for i, b := range bs {
		assert.Equal(t, i32Bytes([]int32{2}), getBytes(t, b, x[i]))
		require.NoError(t, b.Free(x[i]), "rank %d: nothing in flight", i)
	}
}

// joinAll joins every Backend of g as its rank of a new communicator.
func joinAll(t *testing.T, g *core.Group) []*core.Comm {
	t.Helper()
	bs := g.Backends()
	id, err := bs[0].NewCommID()
	require.NoError(t, err)
	comms := make([]*core.Comm, len(bs))
	var wg sync.WaitGroup
	for r, b := range bs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := b.JoinComm(id, len(bs), r)
			assert.NoError(t, err)
			comms[r] = c
		}()
	}
	waitRanks(t, &wg, "the ranks' joins")
	for r, c := range comms {
		require.NotNil(t, c, "rank %d", r)
	}
	return comms
}

// TestCommContextDeadlineAbortsSoNoRankHangs: rank 2 never takes part.
// Rank 0's deadline aborts the communicator: rank 0 gets an ErrInFlight
// wrapping context.DeadlineExceeded, and rank 1, which waits with no
// deadline, fails instead of hanging. Every Comm then refuses calls, and
// every buffer can be freed.
func TestCommContextDeadlineAbortsSoNoRankHangs(t *testing.T) {
	g, _ := openMachine(t, 3, nil)
	bs := g.Backends()
	comms := joinAll(t, g)
	bufs := make([]core.Buffer, 3)
	for r, b := range bs {
		bufs[r] = putBytes(t, b, i32Bytes([]int32{int32(r)}))
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		errs[1] = comms[1].AllReduce(bufs[1], bufs[1], core.DataInt32, core.ReduceSum)
	}()
	go func() {
		defer wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		errs[0] = comms[0].AllReduceContext(ctx, bufs[0], bufs[0], core.DataInt32, core.ReduceSum)
	}()
	waitRanks(t, &wg, "ranks 0 and 1's all-reduces")
	requireErrKind(t, errs[0], core.ErrInFlight, "Comm.AllReduceContext", "communicator was aborted")
	assert.ErrorIs(t, errs[0], context.DeadlineExceeded)
	requireErrKind(t, errs[1], core.ErrDriver, "Comm.AllReduce")
	requireKind(t, comms[2].AllReduce(bufs[2], bufs[2], core.DataInt32, core.ReduceSum), core.ErrDriver)
	for r, c := range comms {
		requireErrKind(t, c.AllReduce(bufs[r], bufs[r], core.DataInt32, core.ReduceSum), core.ErrClosed, "aborted")
		require.NoError(t, c.Close())
		require.NoError(t, bs[r].Free(bufs[r]), "rank %d: nothing in flight", r)
		assert.Zero(t, bs[r].LaunchResourceCounts().Leases, "rank %d", r)
	}
}

// TestJoinCommContextRankThatNeverStarts: a join whose other rank never
// starts returns once its deadline passes, with nothing left on the device;
// the Backend closes cleanly.
func TestJoinCommContextRankThatNeverStarts(t *testing.T) {
	g, m := openMachine(t, 2, nil)
	b := g.Backends()[0]
	id, err := b.NewCommID()
	require.NoError(t, err)
	var c *core.Comm
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		c, err = b.JoinCommContext(ctx, id, 2, 0)
	}()
	waitRanks(t, &wg, "a join whose other rank never starts")
	assert.Nil(t, c)
	requireErrKind(t, err, core.ErrInFlight, "JoinCommContext", "stopped waiting for the other ranks to join")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Zero(t, m.Device(0).Live().Communicators)
	var nilCtx context.Context
	_, err = b.JoinCommContext(nilCtx, id, 2, 0)
	requireErrKind(t, err, core.ErrInvalidArgument, "context is nil")
	require.NoError(t, g.Close())
}
