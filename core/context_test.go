package core_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// slowDevice reports queued work unfinished to queries while hold is set,
// as a GPU does for a long kernel; synchronizations still complete it.
type slowDevice struct {
	*sim.Device
	hold atomic.Bool
}

func (s *slowDevice) EventQuery(e core.Event) (bool, error) {
	if s.hold.Load() {
		return false, nil
	}
	return s.Device.EventQuery(e)
}

func openSlow(t *testing.T) (*core.Backend, *slowDevice) {
	t.Helper()
	dev := &slowDevice{Device: sim.New(sim.Config{TotalMemory: testMemory})}
	b, err := core.Open(dev, core.WithLogger(quietLogger))
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := b.Close(); err != nil && !errors.Is(err, core.ErrClosed) {
			t.Errorf("Close: %v", err)
		}
		sim.RequireNoLeaks(t, dev.Device)
	})
	return b, dev
}

func TestAwaitIntoContextStopsAndThePendingIsStillCollectable(t *testing.T) {
	b, dev := openSlow(t)
	h, err := b.Alloc(4)
	require.NoError(t, err)
	dev.hold.Store(true)
	p, err := b.RunAsync(core.Batch{Uploads: []core.UploadAt{{Buf: h, Data: []byte{1, 2, 3, 4}}}, Reads: []core.Range{{Buf: h, Len: 4}}})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	dst := [][]byte{[]byte("keep")}
	out, err := p.AwaitIntoContext(ctx, dst)
	requireErrKind(t, err, core.ErrInFlight, "still running")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, [][]byte{[]byte("keep")}, out)
	requireErrKind(t, b.Free(h), core.ErrInFlight) // the buffer is still bound to the work

	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	assert.ErrorIs(t, p.AwaitContext(cctx), context.Canceled)

	dev.hold.Store(false)
	out, err = p.AwaitIntoContext(context.Background(), nil)
	require.NoError(t, err)
	assert.Equal(t, [][]byte{{1, 2, 3, 4}}, out)
	require.NoError(t, b.Free(h))
}

func TestAwaitContextReturnsWhenTheWorkFinishes(t *testing.T) {
	b, dev := openSlow(t)
	h, err := b.Alloc(4)
	require.NoError(t, err)
	dev.hold.Store(true)
	p, err := b.RunAsync(core.Batch{Fills: []core.Fill{{Buf: h, Value: 5}}})
	require.NoError(t, err)
	go func() {
		time.Sleep(2 * time.Millisecond)
		dev.hold.Store(false)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, p.AwaitContext(ctx))
	got, err := b.Download(h.All(), nil)
	require.NoError(t, err)
	assert.Equal(t, []byte{5, 5, 5, 5}, got)
}

func TestRunContextCancelledIsCollectedInTheBackground(t *testing.T) {
	b, dev := openSlow(t)
	h, err := b.Alloc(4)
	require.NoError(t, err)
	dev.hold.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Millisecond)
	defer cancel()
	dst := [][]byte{nil}
	out, err := b.RunContext(ctx, core.Batch{Fills: []core.Fill{{Buf: h, Value: 9}}, Reads: []core.Range{{Buf: h, Len: 4}}}, dst)
	requireErrKind(t, err, core.ErrInFlight)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, dst, out)
	// The background collector synchronizes the work; Close waits for it and
	// the cleanup's leak check proves nothing was left behind.
	require.NoError(t, b.Close())
}

func TestRunContextForms(t *testing.T) {
	b, _ := openSim(t, sim.Config{})
	h, err := b.Alloc(4)
	require.NoError(t, err)
	out, err := b.RunContext(context.Background(), core.Batch{Fills: []core.Fill{{Buf: h, Value: 3}}, Reads: []core.Range{{Buf: h, Len: 4}}}, nil)
	require.NoError(t, err)
	assert.Equal(t, [][]byte{{3, 3, 3, 3}}, out)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = b.RunContext(ctx, core.Batch{Fills: []core.Fill{{Buf: h, Value: 4}}}, nil)
	requireErrKind(t, err, core.ErrInFlight, "nothing was queued")
	assert.ErrorIs(t, err, context.Canceled)
	got, err := b.Download(h.All(), nil)
	require.NoError(t, err)
	assert.Equal(t, []byte{3, 3, 3, 3}, got, "a done context queues nothing")
	p0, err := b.RunAsync(core.Batch{Fills: []core.Fill{{Buf: h, Value: 6}}, Reads: []core.Range{{Buf: h, Len: 4}}})
	require.NoError(t, err)
	out, err = p0.AwaitIntoContext(ctx, nil) // ctx is done, but the work has finished: its result wins
	require.NoError(t, err)
	assert.Equal(t, [][]byte{{6, 6, 6, 6}}, out)
	var nilCtx context.Context // a nil context is exactly what is being refused
	_, err = b.RunContext(nilCtx, core.Batch{}, nil)
	requireErrKind(t, err, core.ErrInvalidArgument, "context is nil")
	var p *core.Pending
	requireErrKind(t, p.AwaitContext(context.Background()), core.ErrInvalidArgument)
	_, err = p.AwaitIntoContext(context.Background(), nil)
	requireErrKind(t, err, core.ErrInvalidArgument)
}

func TestGraphReplayContext(t *testing.T) {
	b, dev := openSlow(t)
	h, err := b.Alloc(4)
	require.NoError(t, err)
	in := []byte{1, 2, 3, 4}
	g, err := b.Capture(core.Batch{Uploads: []core.UploadAt{{Buf: h, Data: in}}, Reads: []core.Range{{Buf: h, Len: 4}}})
	require.NoError(t, err)

	out, err := g.ReplayContext(context.Background(), nil)
	require.NoError(t, err)
	assert.Equal(t, [][]byte{{1, 2, 3, 4}}, out)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	in[0] = 9
	out, err = g.ReplayContext(ctx, out)
	require.NoError(t, err)
	assert.Equal(t, [][]byte{{9, 2, 3, 4}}, out)

	dev.hold.Store(true)
	short, cancelShort := context.WithTimeout(context.Background(), 3*time.Millisecond)
	defer cancelShort()
	keep := [][]byte{[]byte("keep")}
	got, err := g.ReplayContext(short, keep)
	requireErrKind(t, err, core.ErrInFlight, "still running")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, keep, got)
	dev.hold.Store(false)
	// The background collector finishes the abandoned replay; then the
	// Graph closes.
	deadline := time.Now().Add(5 * time.Second)
	for {
		err = g.Close()
		if err == nil || !errors.Is(err, core.ErrInFlight) || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	require.NoError(t, err)

	done, cancelDone := context.WithCancel(context.Background())
	cancelDone()
	_, err = g.ReplayContext(done, nil)
	requireErrKind(t, err, core.ErrInFlight, "nothing was launched")
	assert.ErrorIs(t, err, context.Canceled)
	var nilG *core.Graph
	_, err = nilG.ReplayContext(context.Background(), nil)
	requireErrKind(t, err, core.ErrInvalidArgument)
}

// TestContextWaitsCountTheirFences: a wait with a context that can be
// done polls the work's completion instead of synchronizing its stream,
// and each wait that sees its work finish counts one fence, as the
// blocking forms do.
func TestContextWaitsCountTheirFences(t *testing.T) {
	b, _ := openSim(t, sim.Config{})
	h, err := b.Alloc(4)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	batch := core.Batch{Fills: []core.Fill{{Buf: h, Value: 7}}, Reads: []core.Range{h.All()}}
	g, err := b.Capture(batch)
	require.NoError(t, err)
	const n = 100
	waits := map[string]func() ([][]byte, error){
		"RunContext":    func() ([][]byte, error) { return b.RunContext(ctx, batch, nil) },
		"ReplayContext": func() ([][]byte, error) { return g.ReplayContext(ctx, nil) },
		"AwaitIntoContext": func() ([][]byte, error) {
			p, err := b.RunAsync(batch)
			if err != nil {
				return nil, err
			}
			return p.AwaitIntoContext(ctx, nil)
		},
		"Run": func() ([][]byte, error) { return b.Run(batch, nil) }, // the blocking form, for reference
	}
	for name, wait := range waits {
		before := b.Telemetry().SyncPoints
		for range n {
			out, err := wait()
			require.NoError(t, err, name)
			require.Equal(t, [][]byte{{7, 7, 7, 7}}, out, name)
		}
		assert.Equal(t, uint64(n), b.Telemetry().SyncPoints-before, name)
	}
	require.NoError(t, g.Close())
	require.NoError(t, b.Free(h))
}
