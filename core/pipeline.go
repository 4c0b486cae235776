package core

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
	"github.com/vyre-go/vyrecuda/core/internal/spin"
	"github.com/vyre-go/vyrecuda/core/internal/streams"
)

// This file owns the goroutines that copy host memory for transfer calls
// (copy jobs, their helpers, parallel copies) and the staging blocks and
// streams of a staged transfer; staged.go runs staged transfers and the
// parts of packed uploads on them.

// maxCopyWorkers bounds the helper goroutines one copy job can wake;
// xferplan never plans more workers than this.
const maxCopyWorkers = 16

// Host copies are split into tasks that goroutines claim one at a time
// from a shared counter, the calling goroutine among them, so the caller
// never waits for a helper that has not started: it waits only for tasks
// already running. Helpers come from copyHelpers, a package-wide set of
// goroutines that keep polling for work for a short while after each job.
// On the device host (a virtual machine) waking an idle thread took tens of
// microseconds, and the wake-ups of 15 helpers follow one another: a
// 1024 x 4 KiB pack (about 0.5 ms of copying on one thread) ran on little
// more than one core when each call started its helpers afresh.
const (
	// tasksPerWorker is how many tasks each worker's share is split into,
	// so early workers take over the shares of late ones.
	tasksPerWorker = 4
	// ntCopyBytes is the length from which Go's memmove (amd64) switches to
	// non-temporal stores, which write the destination without first
	// reading it into the cache; copy tasks of large copies are kept at
	// least this long.
	ntCopyBytes = 1 << 20
	// helperSpin is how long a helper keeps polling for the next job after
	// its last one: longer than the driver work between the copies of
	// back-to-back calls (a DMA, a launch and a fence, 0.1-0.3 ms), so a
	// stream of calls finds its helpers awake, and short enough that an
	// idle process burns at most this much time per helper after a call.
	helperSpin = DefaultCopyHelperLinger
	// helperIdle is how long a parked helper waits for a job before it
	// exits, so an idle process keeps no goroutines.
	helperIdle = 100 * time.Millisecond
)

// taskJob is n tasks claimed in order by whoever runs work. A gated job
// hands out only the tasks below its gate, which its owner raises as the
// data they need becomes ready (a staged readback's chunk landing, a
// staging block coming free).
type taskJob struct {
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

// takeSeat reserves one of the job's helper seats, or reports false when
// none is left.
func (j *taskJob) takeSeat() bool {
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
func (j *taskJob) claim() (int64, bool) {
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

// step runs one claimed task and reports whether there was one.
func (j *taskJob) step() bool {
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

// work runs claimed tasks until none may be claimed now, and reports
// whether it ran any.
func (j *taskJob) work() bool {
	ran := false
	for j.step() {
		ran = true
	}
	return ran
}

// workAll runs claimed tasks until every task has been claimed, polling
// while the gate holds the rest back.
func (j *taskJob) workAll() {
	var sp spinner
	for j.next.Load() < j.n {
		if !j.work() {
			sp.pause()
		}
	}
}

// stop ends a job whose tasks skip their work once aborted is set: after
// a failure (failed) it sets aborted, so the tasks not yet claimed copy
// nothing; either way it opens the gate, runs what is left and returns once
// every task has returned, and unshares the job when it was shared.
func (j *taskJob) stop(aborted *atomic.Bool, shared, failed bool) {
	if failed {
		aborted.Store(true)
	}
	j.gate.Store(j.n)
	j.workAll()
	j.wait()
	if shared {
		copyHelpers.unshare()
	}
}

// unclaimed reports whether tasks are left to claim (gated or not).
func (j *taskJob) unclaimed() bool { return j.next.Load() < j.n }

// waitSpin is how long the caller of a copy job polls for the helpers'
// last tasks before it blocks. Blocking costs a thread wake-up when the
// last task ends; on the reference host (a virtual machine) that made a
// 1 MiB copy on 16 goroutines take 53 us against 60 us on one.
const waitSpin = 200 * time.Microsecond

// wait returns once every task of j has returned: it polls for up to
// waitSpin, then blocks.
func (j *taskJob) wait() {
	var sp spinner
	var until time.Time
	for j.left.Load() > 0 {
		if now, ok := sp.pause(); ok {
			if until.IsZero() {
				until = now.Add(waitSpin)
			} else if now.After(until) {
				<-j.done
				return
			}
		}
	}
}

// spinner paces one polling loop (spin.Spinner); its zero value is ready.
type spinner struct{ spin.Spinner }

// pause is called once per poll that found nothing to do (spin.Spinner.Pause).
func (s *spinner) pause() (time.Time, bool) { return s.Spinner.Pause() }

// helperSet is the goroutines that help with the current job.
type helperSet struct {
	cur  atomic.Pointer[taskJob] // the job being shared, nil when none
	live atomic.Int32            // helper goroutines running
	wake chan struct{}           // one token wakes one parked helper
	idle time.Duration
	// awake is how long a helper woken without a job (prewake) polls for
	// one before it parks again, in nanoseconds.
	awake atomic.Int64
	// Background jobs (evictions of readback staging after their call
	// returned, hostmem.Pool.EvictLater) are listed in bg, oldest first, until every
	// task of theirs is claimed; bgHead is the first of them, read without
	// the lock. Helpers run their tasks one at a time, and only when the
	// shared job has none to hand out (it is gated, or has its helpers), so
	// a call's own copying always comes first.
	bgMu   sync.Mutex
	bg     []*taskJob
	bgHead atomic.Pointer[taskJob]
	// polling counts the helpers polling for work (not parked).
	polling atomic.Int32
}

// addBackground lists j (not gated) as a background job and wakes up to n
// helpers for it.
func (h *helperSet) addBackground(j *taskJob, n int) {
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
func (h *helperSet) bgStep() *taskJob {
	for {
		j := h.bgHead.Load()
		if j == nil {
			return nil
		}
		if j.step() {
			return j
		}
		// Every task of j is claimed: drop the jobs that are so.
		h.bgMu.Lock()
		if h.bgHead.Load() == j {
			h.bg = slices.DeleteFunc(h.bg, func(x *taskJob) bool { return !x.unclaimed() })
			var head *taskJob
			if len(h.bg) > 0 {
				head = h.bg[0]
			}
			h.bgHead.Store(head)
		}
		h.bgMu.Unlock()
	}
}

// copyHelpers serves every Backend: one job at a time is shared with them;
// a call that finds it busy starts helpers of its own.
var copyHelpers = newHelperSet(helperIdle)

func newHelperSet(idle time.Duration) *helperSet {
	return &helperSet{wake: make(chan struct{}, maxCopyWorkers), idle: idle}
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

// prewake wakes up to n parked helpers (starting helpers until n run)
// ahead of a copy job its caller is about to share, and has each poll for
// a job for up to spin before it parks again: waking a parked thread takes
// tens of microseconds on the reference host, which then overlap the
// caller's validation and planning instead of delaying the copying.
func (h *helperSet) prewake(n int, spin time.Duration) {
	if n <= 0 || spin <= 0 {
		return
	}
	h.awake.Store(int64(spin))
	h.wakeUp(n)
}

// run shares j with up to helpers helpers and works on it until every task
// has returned. It reports false, doing nothing, when another job is being
// shared.
func (h *helperSet) run(j *taskJob, helpers int) bool {
	if !h.share(j, helpers) {
		return false
	}
	j.work()
	j.wait()
	h.cur.Store(nil)
	return true
}

// share makes j the shared job and wakes up to helpers helpers for it, or
// reports false, doing nothing, when another job is being shared. The
// caller must wait for j and then unshare it.
func (h *helperSet) share(j *taskJob, helpers int) bool {
	j.seats.Store(int32(min(helpers, maxCopyWorkers)))
	if !h.cur.CompareAndSwap(nil, j) {
		return false
	}
	h.wakeUp(helpers)
	return true
}

// unshare ends the sharing of the current job (every task of it returned).
func (h *helperSet) unshare() { h.cur.Store(nil) }

// startJob shares j with w-1 helpers: the shared ones when free, else
// goroutines of its own. It reports whether j was shared (then the caller
// unshares it after waiting for it).
func startJob(j *taskJob, w int) bool {
	if w <= 1 {
		return false
	}
	if copyHelpers.share(j, w-1) {
		return true
	}
	for range w - 1 {
		go j.workAll()
	}
	return false
}

// helper works on shared jobs. After each it polls for the next one for the
// job's linger, then parks until woken or h.idle passes, when it exits.
func (h *helperSet) helper() {
	defer h.live.Add(-1)
	timer := time.NewTimer(h.idle)
	defer timer.Stop()
	var until time.Time // zero: a new or woken helper looks for a job once
	var last, skip *taskJob
	for {
		var sp spinner
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
				if j.work() || j != last {
					until, last = time.Now().Add(j.linger), j
				} else if h.bgStep() == nil {
					sp.pause() // gated: its owner raises the gate
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
			if now, ok := sp.pause(); ok && !now.Before(until) {
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

// runTasks runs f(0..n-1), each once, on up to w goroutines including the
// calling one, and returns when every f has returned; shared helpers then
// poll for a next job for linger (<= 0: they park at once). Helpers that
// have not claimed a task by then claim none later, so nothing f uses is
// touched after runTasks returns.
func runTasks(n, w int, linger time.Duration, f func(i int)) {
	if w <= 1 || n <= 1 {
		for i := range n {
			f(i)
		}
		return
	}
	j := &taskJob{f: f, n: int64(n), linger: linger, done: make(chan struct{})}
	j.left.Store(int64(n))
	if copyHelpers.run(j, min(w, n)-1) {
		return
	}
	for range min(w, n) - 1 {
		go j.work()
	}
	j.work()
	j.wait()
}

// copyTask is the bytes per task of a parallel copy of n bytes by w
// workers: about tasksPerWorker tasks each, but at least ntCopyBytes when
// that still gives every worker one (so each task uses non-temporal
// stores), a multiple of 64 so tasks cover whole cache lines.
func copyTask(n, w int) int {
	task := n / (w * tasksPerWorker)
	if task < ntCopyBytes {
		task = min(ntCopyBytes, n/w)
	}
	return max((task+63)&^63, 64)
}

// parallelCopy copies src into dst (of equal length) with cp, in tasks on
// up to w goroutines, the calling one among them; helpers then linger as
// runTasks says. cp must finish its own work (fence its non-temporal
// stores) before it returns: a task counts as done when cp returns.
func parallelCopy(dst, src []byte, w int, linger time.Duration, cp func(dst, src []byte)) {
	n := len(src)
	if w <= 1 || n < 2 {
		cp(dst, src)
		return
	}
	task := copyTask(n, w)
	runTasks((n+task-1)/task, w, linger, func(i int) {
		lo := i * task
		hi := min(lo+task, n)
		cp(dst[lo:hi], src[lo:hi])
	})
}

// forParts splits items [0, n) into contiguous parts of about equal weight,
// about tasksPerWorker per worker, and runs f on each on up to w
// goroutines, the calling one among them. start(i) is the cumulative weight
// before item i (non-decreasing, start(0) == 0) and total the weight of all
// items. Helpers then linger as runTasks says.
func forParts(n, w int, linger time.Duration, start func(i int) int, total int, f func(lo, hi int)) {
	if w <= 1 || n < 2 {
		f(0, n)
		return
	}
	parts := min(n, w*tasksPerWorker)
	bounds := make([]int, 1, parts+1)
	lo := 0
	for k := 1; k <= parts && lo < n; k++ {
		hi := n
		if k < parts {
			// The first item whose start reaches this part's share of the weight.
			goal := int(uint64(total) * uint64(k) / uint64(parts))
			a, z := lo+1, n
			for a < z {
				m := int(uint(a+z) >> 1)
				if start(m) < goal {
					a = m + 1
				} else {
					z = m
				}
			}
			hi = a
		}
		bounds = append(bounds, hi)
		lo = hi
	}
	runTasks(len(bounds)-1, w, linger, func(k int) { f(bounds[k], bounds[k+1]) })
}

// pipeline is the staging blocks and streams of one pipelined transfer.
type pipeline struct {
	b      *Backend
	op     string
	ents   []*residentEntry // the transfer's resident buffer, for the quarantine
	st     hostmem.Staging
	blocks [][]byte
	leases []*streams.Lease
	syncs  uint64 // stream synchronizations that succeeded
}

// newPipeline takes k staging blocks of chunk bytes and leases leased
// streams (with their events), all or nothing, for a transfer whose caller
// holds ents in flight.
func (b *Backend) newPipeline(op string, ents []*residentEntry, k, chunk, leases int) (*pipeline, error) {
	p := &pipeline{b: b, op: op, ents: ents, st: hostmem.NewStaging(b.hostPool)}
	p.blocks = make([][]byte, k)
	for j := range p.blocks {
		blk, err := p.st.Slice(op, chunk)
		if err != nil {
			p.st.ReturnAll()
			return nil, err
		}
		p.blocks[j] = blk
	}
	p.leases = make([]*streams.Lease, 0, leases)
	for range leases {
		l, err := b.launch.Lease(op, false)
		if err != nil {
			p.finish(true)
			return nil, err
		}
		p.leases = append(p.leases, l)
	}
	return p, nil
}

// wait blocks until the work queued on block j's stream has completed.
func (p *pipeline) wait(j int) error {
	if err := p.b.drv.StreamSynchronize(p.leases[j].Stream); err != nil {
		return driverError(p.op, "StreamSynchronize", err)
	}
	p.syncs++
	return nil
}

// fail drains every stream so no queued copy still uses the staging, gives
// everything back (or, when a drain fails, quarantines it) and returns err.
func (p *pipeline) fail(err error) error {
	p.b.syncOrQuarantine(p.op, inUse{st: []*hostmem.Staging{&p.st}, ents: p.ents}, p.leases...)
	p.leases = nil
	p.st.ReturnAll()
	return err
}

// finish gives the streams back (healthy or not) and the staging blocks to
// their pool. Every stream must be idle.
func (p *pipeline) finish(healthy bool) {
	p.giveBackLeases(healthy)
	p.st.ReturnAll()
}

// giveBackLeases gives the streams back (healthy or not); every stream
// must be idle.
func (p *pipeline) giveBackLeases(healthy bool) {
	for _, l := range p.leases {
		p.b.launch.Return(l, healthy)
	}
	p.leases = nil
}
