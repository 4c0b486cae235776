package copyjob

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vyre-go/vyrecuda/core/internal/spin"
)

// helperIdle is how long a parked helper waits for a job before it exits,
// so an idle process keeps no goroutines.
const helperIdle = 100 * time.Millisecond

// helperSet is the goroutines that help with the current job.
type helperSet struct {
	cur  atomic.Pointer[Job] // the job being shared, nil when none
	live atomic.Int32        // helper goroutines running
	wake chan struct{}       // one token wakes one parked helper
	idle time.Duration
	// awake is how long a helper woken without a job (prewake) polls for
	// one before it parks again, in nanoseconds.
	awake atomic.Int64
	// Background jobs (evictions of readback staging after their call
	// returned) are listed in bg, oldest first, until every task of theirs
	// is claimed; bgHead is the first of them, read without the lock.
	// Helpers run their tasks one at a time, and only when the shared job
	// has none to hand out (it is gated, or has its helpers), so a call's
	// own copying always comes first.
	bgMu   sync.Mutex
	bg     []*Job
	bgHead atomic.Pointer[Job]
	// polling counts the helpers polling for work (not parked).
	polling atomic.Int32
}

// helpers serves every caller in the process: one job at a time is shared
// with them; a call that finds it busy starts helpers of its own.
var helpers = newHelperSet(helperIdle)

func newHelperSet(idle time.Duration) *helperSet {
	return &helperSet{wake: make(chan struct{}, MaxWorkers), idle: idle}
}

// Background lists j (not gated) as a background job, whose tasks the
// helpers run when no shared job needs them, and wakes up to n helpers for
// it unless that many already poll. The caller learns of its end through
// the finish function it gave Init, or Done.
func Background(j *Job, n int) { helpers.addBackground(j, n) }

// Prewake wakes up to n parked helpers (starting helpers until n run)
// ahead of a copy job its caller is about to share, and has each poll for
// a job for up to poll before it parks again: waking a parked thread takes
// tens of microseconds on the reference host, which then overlap the
// caller's validation and planning instead of delaying the copying.
func Prewake(n int, poll time.Duration) { helpers.prewake(n, poll) }

// addBackground lists j (not gated) as a background job and wakes up to n
// helpers for it.
func (h *helperSet) addBackground(j *Job, n int) {
	h.bgMu.Lock()
	h.bg = append(h.bg, j)
	h.bgHead.CompareAndSwap(nil, j)
	h.bgMu.Unlock()
	// Helpers still polling after the call's copying take it without a
	// wake-up; waking one that polls would only leave a token behind,
	// and the caller pays for every wake-up it makes.
	if n -= int(h.polling.Load()); n > 0 {
		h.wakeUp(n)
	}
}

// bgStep runs one task of the oldest background job with one left, and
// returns that job, or nil when there was none.
func (h *helperSet) bgStep() *Job {
	for {
		j := h.bgHead.Load()
		if j == nil {
			return nil
		}
		if j.Step() {
			return j
		}
		// Every task of j is claimed: drop the jobs that are so.
		h.bgMu.Lock()
		if h.bgHead.Load() == j {
			h.bg = slices.DeleteFunc(h.bg, func(x *Job) bool { return !x.unclaimed() })
			var head *Job
			if len(h.bg) > 0 {
				head = h.bg[0]
			}
			h.bgHead.Store(head)
		}
		h.bgMu.Unlock()
	}
}

// wakeUp gives up to n parked helpers a token and starts helpers until n
// run.
func (h *helperSet) wakeUp(n int) {
	n = min(n, cap(h.wake))
	for range n {
		// Polling helpers take the job by themselves; parked ones need a token.
		select {
		case h.wake <- struct{}{}:
		default:
		}
	}
	for k := h.live.Load(); k < int32(n); k++ {
		h.live.Add(1)
		go h.helper()
	}
}

// prewake is Prewake on h.
func (h *helperSet) prewake(n int, poll time.Duration) {
	if n <= 0 || poll <= 0 {
		return
	}
	h.awake.Store(int64(poll))
	h.wakeUp(n)
}

// run shares j with up to n helpers and works on it until every task has
// returned. It reports false, doing nothing, when another job is being
// shared.
func (h *helperSet) run(j *Job, n int) bool {
	if !h.share(j, n) {
		return false
	}
	j.Work()
	j.Wait()
	h.cur.Store(nil)
	return true
}

// share makes j the shared job and wakes up to n helpers for it, or
// reports false, doing nothing, when another job is being shared. The
// caller must wait for j and then unshare it.
func (h *helperSet) share(j *Job, n int) bool {
	j.seats.Store(int32(min(n, MaxWorkers)))
	if !h.cur.CompareAndSwap(nil, j) {
		return false
	}
	h.wakeUp(n)
	return true
}

// unshare ends the sharing of the current job (every task of it returned).
func (h *helperSet) unshare() { h.cur.Store(nil) }

// helper works on shared jobs. After each it polls for the next one for the
// job's linger, then parks until woken or h.idle passes, when it exits.
func (h *helperSet) helper() {
	defer h.live.Add(-1)
	timer := time.NewTimer(h.idle)
	defer timer.Stop()
	var until time.Time // zero: a new or woken helper looks for a job once
	var last, skip *Job
	for {
		var sp spin.Spinner
		h.polling.Add(1)
		for {
			if j := h.cur.Load(); j != nil && j != skip && j.unclaimed() {
				if j != last && !j.takeSeat() {
					// The job has the helpers it asked for: more would only
					// contend for its task counter (a 128 KiB copy on 4
					// goroutines took 5.1 us with every polling helper
					// joining in, against 8.3 on one).
					skip = j
					continue
				}
				// The linger counts from the helper's last task of a job
				// (or from joining a job whose gate holds every task back).
				// Reading the clock on every poll of a gated job took 28% of
				// the CPU samples of a W7 readback on the reference host,
				// and its instructions, unlike the spin-wait hint, take
				// execution resources from the hardware thread beside them.
				if j.Work() || j != last {
					until, last = time.Now().Add(j.linger), j
				} else if h.bgStep() == nil {
					sp.Pause() // gated: its owner raises the gate
				}
				continue
			}
			if bj := h.bgStep(); bj != nil {
				until = time.Now().Add(bj.linger)
				continue
			}
			if until.IsZero() {
				break
			}
			if now, ok := sp.Pause(); ok && !now.Before(until) {
				break
			}
		}
		h.polling.Add(-1)
		timer.Reset(h.idle)
		select {
		case <-h.wake:
		case <-timer.C:
			return
		}
		// Woken for a job (found at once) or ahead of one (prewake): poll
		// for it for up to awake.
		until = time.Now().Add(time.Duration(h.awake.Load()))
	}
}
