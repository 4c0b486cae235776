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

// busyStreamDevice holds its streams busy while busy is set: queries report
// the work unfinished and a StreamSynchronize blocks (after saying so on
// entered) until release is closed, as the fence of a long kernel does.
type busyStreamDevice struct {
	*sim.Device
	busy    atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (d *busyStreamDevice) StreamSynchronize(s core.Stream) error {
	if d.busy.Load() {
		d.entered <- struct{}{}
		<-d.release
	}
	return d.Device.StreamSynchronize(s)
}

func (d *busyStreamDevice) EventQuery(e core.Event) (bool, error) {
	if d.busy.Load() {
		return false, nil
	}
	return d.Device.EventQuery(e)
}

// TestAwaitContextDoesNotWaitBehindABlockingAwait: one goroutine blocks in
// Pending.Await while the stream is busy; another's AwaitContext on the same
// Pending still returns when its context is done, and once the work
// finishes both see it.
func TestAwaitContextDoesNotWaitBehindABlockingAwait(t *testing.T) {
	dev := &busyStreamDevice{Device: sim.New(sim.Config{TotalMemory: testMemory}),
		entered: make(chan struct{}, 1), release: make(chan struct{})}
	b, err := core.Open(dev, core.WithLogger(quietLogger))
	require.NoError(t, err)
	released := false
	unblock := func() {
		if !released {
			released = true
			dev.busy.Store(false)
			close(dev.release)
		}
	}
	t.Cleanup(func() {
		unblock()
		if err := b.Close(); err != nil && !errors.Is(err, core.ErrClosed) {
			t.Errorf("Close: %v", err)
		}
		sim.RequireNoLeaks(t, dev.Device)
	})
	h, err := b.Alloc(4)
	require.NoError(t, err)
	dev.busy.Store(true)
	p, err := b.RunAsync(core.Batch{Fills: []core.Fill{{Buf: h, Value: 8}}})
	require.NoError(t, err)

	awaited := make(chan error, 1)
	go func() { awaited <- p.Await() }()
	<-dev.entered // the Await is inside the fence

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	ctxDone := make(chan error, 1)
	go func() { ctxDone <- p.AwaitContext(ctx) }()
	select {
	case err := <-ctxDone:
		requireErrKind(t, err, core.ErrInFlight, "still running")
		assert.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(10 * time.Second):
		unblock()
		<-ctxDone
		t.Fatal("AwaitContext waited for another goroutine's Await instead of its own context")
	}
	select {
	case err := <-awaited:
		t.Fatalf("Await returned while the stream was busy: %v", err)
	default:
	}

	unblock()
	require.NoError(t, <-awaited)
	ctx2, cancel2 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel2()
	require.NoError(t, p.AwaitContext(ctx2), "the finished work is reported")
	got, err := b.Download(h.All(), nil)
	require.NoError(t, err)
	assert.Equal(t, []byte{8, 8, 8, 8}, got)
}
