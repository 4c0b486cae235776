// Package copyjob runs the host memory copies of transfer calls on several
// goroutines: a Job is n tasks that goroutines claim one at a time from a
// shared counter, the calling goroutine among them, and a package-wide set
// of helper goroutines joins one job at a time, lingering for the next one
// after each. It owns those helpers, their wake-ups and background jobs,
// and the splitting of copies and weighted item lists into tasks.
//
// It knows nothing of devices, staging or Backends: tasks are plain
// functions, and it never imports core or any package that does.
package copyjob

import (
	"sync/atomic"
	"time"

	"github.com/vyre-go/vyrecuda/core/internal/spin"
)

// Host copies are split into tasks that goroutines claim one at a time
// from a shared counter, the calling goroutine among them, so the caller
// never waits for a helper that has not started: it waits only for tasks
// already running. Helpers come from the package-wide set of goroutines
// (helpers.go) that keep polling for work for a short while after each
// job. On the device host (a virtual machine) waking an idle thread took
// tens of microseconds, and the wake-ups of 15 helpers follow one another:
// a 1024 x 4 KiB pack (about 0.5 ms of copying on one thread) ran on little
// more than one core when each call started its helpers afresh.

// MaxWorkers bounds the goroutines one copy job can use, the caller's
// among them; xferplan never plans more workers than this.
const MaxWorkers = 16

// TasksPerWorker is how many tasks each worker's share of a job is split
// into, so early workers take over the shares of late ones.
const TasksPerWorker = 4

// DefaultLinger is how long helpers keep polling for the next job after
// a job's last task by default: longer than the driver work between the
// copies of back-to-back calls (a DMA, a launch and a fence, 0.1-0.3 ms),
// so a stream of calls finds its helpers awake, and short enough that an
// idle process burns at most this much time per helper after a call.
const DefaultLinger = 500 * time.Microsecond

// WaitSpin is how long a goroutine waiting for the last tasks of a job
// polls before it blocks. Blocking costs a thread wake-up when the last
// task ends; on the reference host (a virtual machine) that made a 1 MiB
// copy on 16 goroutines take 53 us against 60 us on one.
const WaitSpin = 200 * time.Microsecond

// Job is n tasks claimed in order by whoever runs work. A gated job hands
// out only the tasks below its gate, which its owner raises (Open) as the
// data they need becomes ready (a staged readback's chunk landing, a
// staging block coming free).
type Job struct {
	f      func(i int)
	n      int64
	linger time.Duration // how long helpers poll for the next job after this one
	gated  bool
	gate   atomic.Int64 // gated jobs: tasks [0, gate) may be claimed
	next   atomic.Int64
	left   atomic.Int64
	done   chan struct{} // closed when the last task has returned
	// finish, when set, runs on the goroutine that returned the last task,
	// before done is closed.
	finish func()
	// seats is how many more shared helpers may join the job.
	seats atomic.Int32
}

// NewJob returns a job of n tasks, task i running f(i); helpers poll for
// the next job for linger after it (<= 0: they park at once). A gated job
// hands out no task until Open lets it.
func NewJob(n int, linger time.Duration, gated bool, f func(i int)) *Job {
	j := new(Job)
	j.Init(n, linger, gated, f, nil)
	return j
}

// Init makes j, a zero Job (one embedded in a larger value, say), a job as
// NewJob describes; finish, when not nil, runs on the goroutine that
// returned the last task, before Done is closed.
func (j *Job) Init(n int, linger time.Duration, gated bool, f func(i int), finish func()) {
	j.f, j.n, j.linger, j.gated, j.finish = f, int64(n), linger, gated, finish
	j.done = make(chan struct{})
	j.left.Store(int64(n))
}

// Tasks returns the number of tasks of j.
func (j *Job) Tasks() int64 { return j.n }

// Done returns a channel closed once every task of j has returned.
func (j *Job) Done() <-chan struct{} { return j.done }

// Open lets the tasks [0, k) of a gated job be claimed.
func (j *Job) Open(k int64) { j.gate.Store(k) }

// takeSeat reserves one of the job's helper seats, or reports false when
// none is left.
func (j *Job) takeSeat() bool {
	for {
		s := j.seats.Load()
		if s <= 0 {
			return false
		}
		if j.seats.CompareAndSwap(s, s-1) {
			return true
		}
	}
}

// claim takes the next task, or reports false when none may be taken now.
func (j *Job) claim() (int64, bool) {
	if !j.gated {
		i := j.next.Add(1) - 1
		return i, i < j.n
	}
	for {
		i := j.next.Load()
		if i >= j.gate.Load() {
			return i, false
		}
		if j.next.CompareAndSwap(i, i+1) {
			return i, true
		}
	}
}

// Step runs one claimed task and reports whether there was one.
func (j *Job) Step() bool {
	i, ok := j.claim()
	if !ok {
		return false
	}
	j.f(int(i))
	if j.left.Add(-1) == 0 {
		if j.finish != nil {
			j.finish()
		}
		close(j.done)
	}
	return true
}

// Work runs claimed tasks until none may be claimed now, and reports
// whether it ran any.
func (j *Job) Work() bool {
	ran := false
	for j.Step() {
		ran = true
	}
	return ran
}

// WorkAll runs claimed tasks until every task has been claimed, polling
// while the gate holds the rest back.
func (j *Job) WorkAll() {
	var sp spin.Spinner
	for j.next.Load() < j.n {
		if !j.Work() {
			sp.Pause()
		}
	}
}

// Stop ends a job whose tasks skip their work once aborted is set: after
// a failure (failed) it sets aborted, so the tasks not yet claimed copy
// nothing; either way it opens the gate, runs what is left and returns once
// every task has returned, and unshares the job when it was shared (Start
// said so).
func (j *Job) Stop(aborted *atomic.Bool, shared, failed bool) {
	if failed {
		aborted.Store(true)
	}
	j.gate.Store(j.n)
	j.WorkAll()
	j.Wait()
	if shared {
		helpers.unshare()
	}
}

// unclaimed reports whether tasks are left to claim (gated or not).
func (j *Job) unclaimed() bool { return j.next.Load() < j.n }

// Wait returns once every task of j has returned: it polls for up to
// WaitSpin, then blocks.
func (j *Job) Wait() {
	var sp spin.Spinner
	var until time.Time
	for j.left.Load() > 0 {
		if now, ok := sp.Pause(); ok {
			if until.IsZero() {
				until = now.Add(WaitSpin)
			} else if now.After(until) {
				<-j.done
				return
			}
		}
	}
}
