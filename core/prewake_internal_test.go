package core

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// prewake starts (or wakes) the helpers asked for; they take a job shared
// within their polling time without a wake-up of their own, run its tasks
// exactly once, and exit after the idle time, leaving nothing running.
// Asking for none, or with no polling time, starts nothing.
func TestPrewakeStartsHelpersThatTakeTheNextJobAndExit(t *testing.T) {
	h := newHelperSet(20 * time.Millisecond)
	h.prewake(0, time.Second)
	h.prewake(3, 0)
	assert.Zero(t, h.live.Load(), "nothing asked, nothing started")

	h.prewake(3, 200*time.Millisecond)
	assert.Equal(t, int32(3), h.live.Load())
	// Drain the wake tokens, so helpers that do take the job below do so
	// by polling, not by a token sent with it.
	for len(h.wake) > 0 {
		time.Sleep(time.Millisecond)
	}
	var ran atomic.Int32
	var helped atomic.Bool
	caller := make(chan struct{})
	j := &taskJob{n: 64, linger: -1, done: make(chan struct{})}
	j.f = func(int) {
		select {
		case <-caller: // the caller's own tasks start only after this
		default:
			helped.Store(true)
		}
		ran.Add(1)
		time.Sleep(100 * time.Microsecond)
	}
	j.left.Store(j.n)
	j.seats.Store(3)
	require.True(t, h.cur.CompareAndSwap(nil, j), "share without waking anyone")
	deadline := time.Now().Add(time.Second)
	for !helped.Load() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Microsecond)
	}
	close(caller)
	j.workAll()
	j.wait()
	h.unshare()
	assert.True(t, helped.Load(), "a prewoken helper took a task without being woken for the job")
	assert.Equal(t, int32(64), ran.Load(), "every task ran once")
	for h.live.Load() > 0 && time.Now().Before(deadline.Add(time.Second)) {
		time.Sleep(time.Millisecond)
	}
	assert.Zero(t, h.live.Load(), "helpers exit when idle")
}

// A shared job takes no more helpers than it asked for: with four helpers
// polling, a job shared with one seat never runs more than two tasks at
// once (the caller's and one helper's), and still runs each task once.
func TestSharedJobTakesOnlyItsSeats(t *testing.T) {
	h := newHelperSet(50 * time.Millisecond)
	h.prewake(4, 200*time.Millisecond)
	require.Equal(t, int32(4), h.live.Load())
	for len(h.wake) > 0 {
		time.Sleep(time.Millisecond)
	}
	var running, most, ran atomic.Int32
	j := &taskJob{n: 200, linger: -1, done: make(chan struct{})}
	j.f = func(int) {
		now := running.Add(1)
		for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
		}
		time.Sleep(50 * time.Microsecond)
		running.Add(-1)
		ran.Add(1)
	}
	j.left.Store(j.n)
	require.True(t, h.share(j, 1))
	j.workAll()
	j.wait()
	h.unshare()
	assert.Equal(t, int32(200), ran.Load())
	assert.LessOrEqual(t, most.Load(), int32(2), "tasks running at once")
}
