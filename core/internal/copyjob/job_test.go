package copyjob

import (
	"runtime"
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
	j := NewJob(64, -1, false, func(int) {
		select {
		case <-caller: // the caller's own tasks start only after this
		default:
			helped.Store(true)
		}
		ran.Add(1)
		time.Sleep(100 * time.Microsecond)
	})
	j.seats.Store(3)
	require.True(t, h.cur.CompareAndSwap(nil, j), "share without waking anyone")
	deadline := time.Now().Add(time.Second)
	for !helped.Load() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Microsecond)
	}
	close(caller)
	j.WorkAll()
	j.Wait()
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
	j := NewJob(200, -1, false, func(int) {
		now := running.Add(1)
		for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
		}
		time.Sleep(50 * time.Microsecond)
		running.Add(-1)
		ran.Add(1)
	})
	require.True(t, h.share(j, 1))
	j.WorkAll()
	j.Wait()
	h.unshare()
	assert.Equal(t, int32(200), ran.Load())
	assert.LessOrEqual(t, most.Load(), int32(2), "tasks running at once")
}

// TestGatedJobHandsOutOnlyOpenedTasks: a gated job's tasks below the gate
// are claimed, none above it, until the gate rises; helpers then take the
// rest, and every task runs once.
func TestGatedJobHandsOutOnlyOpenedTasks(t *testing.T) {
	const n = 64
	var ran [n]atomic.Int32
	var gate atomic.Int64
	j := NewJob(n, DefaultLinger, true, func(i int) {
		if int64(i) >= gate.Load() {
			t.Errorf("task %d ran above the gate %d", i, gate.Load())
		}
		ran[i].Add(1)
	})
	require.Equal(t, int64(n), j.Tasks())
	shared := Start(j, 4)
	for _, g := range []int64{0, 5, 5, 32, n} {
		gate.Store(g)
		j.Open(g)
		for j.next.Load() < g {
			j.Step()
		}
		assert.LessOrEqual(t, j.next.Load(), g)
	}
	j.Wait()
	if shared {
		helpers.unshare()
	}
	for i := range ran {
		assert.Equal(t, int32(1), ran[i].Load(), "task %d", i)
	}
}

// A background job runs every task once on the helpers, with no caller
// working on it, and its finish runs exactly once, before Done is closed.
func TestBackgroundJobRunsOnTheHelpersAndFinishes(t *testing.T) {
	const n = 100
	var ran [n]atomic.Int32
	var finished atomic.Int32
	var j Job
	j.Init(n, -1, false, func(i int) { ran[i].Add(1) }, func() {
		select {
		case <-j.Done():
			t.Error("Done closed before finish ran")
		default:
		}
		finished.Add(1)
	})
	Background(&j, 3)
	select {
	case <-j.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the helpers never finished the background job")
	}
	assert.Equal(t, int32(1), finished.Load())
	for i := range ran {
		assert.Equal(t, int32(1), ran[i].Load(), "task %d", i)
	}
	assert.False(t, j.unclaimed())
}

// Stop after a failure sets aborted, so tasks claimed later skip their
// work, and still returns only once every task has returned.
func TestStopAbortsTheUnclaimedTasks(t *testing.T) {
	const n = 32
	var aborted atomic.Bool
	var copied, returned atomic.Int32
	j := NewJob(n, -1, true, func(int) {
		if !aborted.Load() {
			copied.Add(1)
		}
		returned.Add(1)
	})
	shared := Start(j, 3)
	j.Open(4)
	for j.next.Load() < 4 {
		j.Step()
	}
	for returned.Load() < 4 { // a helper may still run one of them
		runtime.Gosched()
	}
	j.Stop(&aborted, shared, true)
	assert.True(t, aborted.Load())
	assert.Equal(t, int32(n), returned.Load(), "every task returned before Stop did")
	assert.Equal(t, int32(4), copied.Load(), "only the tasks opened before the failure did their work")
	assert.Nil(t, helpers.cur.Load(), "the job is no longer shared")
}
