package proptest

// The runner: it runs one step on a Backend and on the model together, arms
// the step's chosen fault, judges every call's outcome against what the
// model predicted, checks the device calls a step made, and resolves the
// handle numbers steps are drawn with.

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// runner executes steps on a Backend and on the model, and judges each.
type runner struct {
	cfg     runConfig
	dev     *sim.Device
	b       *core.Backend
	log     *logCounter
	gen     int // Backend generation: Close-and-reopen steps start a new one
	foreign core.Buffer
	m       *model
	opt     *optModel // the current Backend's OptimizerDispatcher, once used

	// The fault armed for the current step, and the call count of its
	// operation when it was armed.
	armed      *faultSpec
	armedCalls uint64
	allowOOM   bool // this step's allocation may not fit the device
	// packable is set for a transfer that may take the packed path.
	packable bool
	// spareable is set for a readback, which may pin spare staging for the
	// calls after it.
	spareable bool

	// Call counts of the device when the current step began.
	callsBefore map[sim.Op]uint64

	q quarModel

	freedLens []int // lengths of buffers freed lately, which alloc steps ask for again (cache hits)

	broken error    // first violation; later steps are skipped
	trace  []string // resolved calls of the last steps, for failure messages
}

// quarModel is what the model knows of the Backend's quarantine
// (core/quarantine.go): when a failed call's drain fails too, its leases
// and everything its queued work may use (pinned and device staging, an
// in-flight reference on the buffers it targets) stay with the Backend
// until a retried synchronization succeeds. Only the count of quarantined
// leases is visible, so checkGlobal measures the residue (what the device
// holds beyond everything else the model explains) and requires it to be
// nothing without quarantined leases, to be explained by them (one stream
// and one or three events each), and to grow only in a step that failed.
type quarModel struct {
	start int // LaunchResourceCounts().Quarantined when the step began
	// ids are the buffers quarantined work may use: the targets of failed
	// calls since the quarantine was last empty. Free may refuse
	// them as in flight while it is not.
	ids map[uint64]bool
	// The residue at the end of the last step.
	events, queued int // queued: -1 while dispatches make it unknown
	pinned, dev    uint64
	// What the current step's failed call targeted (buffer: the bytes it
	// may write), and whether it failed by an injected fault.
	step    map[uint64]spans
	faulted bool
}

// failedTargets records that the step's failed call used buffer id and may
// have queued work writing x there: if the step leaves a quarantine, that
// work may run later.
func (r *runner) failedTargets(id uint64, x span) {
	if r.q.step == nil {
		r.q.step = make(map[uint64]spans)
	}
	r.q.step[id] = r.q.step[id].add(x)
}

// maybeQuarantined reports whether buffer id may be held by the quarantine
// during this step.
func (r *runner) maybeQuarantined(id uint64) bool {
	// Shared runners with random faults do not track the quarantine: any
	// failed call of any goroutine may have left one.
	return r.q.start > 0 && r.q.ids[id] || r.cfg.shared && r.cfg.faults == faultsRandom
}

// newRunner opens a Backend on a fresh simulated device.
func newRunner(cfg runConfig, foreign core.Buffer) (*runner, error) {
	r := &runner{cfg: cfg, dev: cfg.device(), foreign: foreign, m: newModel(), log: new(logCounter)}
	b, err := core.Open(r.dev, cfg.options(r.log)...)
	if err != nil {
		return nil, err
	}
	r.b = b
	r.armRandom()
	return r, nil
}

// newSharedRunner returns a runner over an existing Backend, for one of
// several goroutines sharing it.
func newSharedRunner(cfg runConfig, dev *sim.Device, b *core.Backend, log *logCounter, foreign core.Buffer) *runner {
	cfg.shared = true
	return &runner{cfg: cfg, dev: dev, b: b, log: log, foreign: foreign, m: newModel()}
}

// armRandom turns on the random faults of a faultsRandom run for the
// current Backend generation, seeded per generation.
func (r *runner) armRandom() {
	if r.cfg.faults == faultsRandom {
		r.dev.FailRateWith(r.cfg.rateSeed+int64(r.gen), r.cfg.rate, r.cfg.rateCode, randomFaultOps()...)
	}
}

// logf appends a resolved call to the trace.
func (r *runner) logf(format string, args ...any) {
	const keep = 12
	if len(r.trace) == keep {
		copy(r.trace, r.trace[1:])
		r.trace = r.trace[:keep-1]
	}
	r.trace = append(r.trace, fmt.Sprintf(format, args...))
}

// do runs one step and every check after it. It returns the first violation
// of the sequence (and nil for every step after it, which is skipped).
func (r *runner) do(s step) error {
	if r.broken != nil {
		return nil
	}
	coreStats.steps.Add(1)
	if !r.cfg.shared {
		r.callsBefore = r.dev.CallCounts()
		r.q.start = r.b.LaunchResourceCounts().Quarantined
		r.m.qActive = r.q.start > 0
	} else if r.cfg.faults == faultsRandom {
		r.sharedQuarantineStart()
	}
	r.q.step, r.q.faulted = nil, false
	r.allowOOM, r.packable, r.spareable = false, false, false
	if f, ok := s.(interface{ chosenFault() *faultSpec }); ok && r.cfg.faults == faultsChosen {
		if fs := f.chosenFault(); fs != nil && r.permitFault(s, fs) {
			r.armed = fs
			r.armedCalls = r.dev.Calls(fs.op)
			if fs.null {
				r.dev.NullNth(fs.op, fs.nth)
			} else {
				r.dev.FailNth(fs.op, fs.nth, fs.code)
			}
		}
	}
	err := s.run(r)
	if r.armed != nil {
		r.armed = nil
		r.dev.ClearFaults()
	}
	if err == nil && !r.cfg.shared {
		err = r.checkGlobal()
	}
	if r.cfg.shared {
		r.sharedQuarantineEnd()
	}
	if err != nil {
		r.broken = fmt.Errorf("step %v: %w\nlast calls:\n  %s", s, err, strings.Join(r.trace, "\n  "))
		return r.broken
	}
	return nil
}

// permitFault keeps MemFree faults to Free of a buffer the Backend
// frees with MemFree directly (see faultOps).
func (r *runner) permitFault(s step, f *faultSpec) bool {
	if f.op != sim.OpMemFree {
		return true
	}
	fs, ok := s.(*freeStep)
	if !ok {
		return false
	}
	h := r.pick(fs.pick)
	return r.m.valid(h) && !r.m.bufs[h.ID].inFlight() && !(r.cfg.poolLimit > 0 && h.Len <= r.cfg.poolLimit)
}

// faultFired reports whether the fault armed for this step hit a call.
func (r *runner) faultFired() bool {
	return r.armed != nil && r.dev.Calls(r.armed.op)-r.armedCalls >= uint64(r.armed.nth)
}

// opAliases lists, per name a step judges a call under, the Ops its
// errors may carry: the dispatcher's calls are judged under names of their
// own ("opt.Free"), and report the name of the call made.
var opAliases = map[string][]string{
	"opt.Alloc": {"Alloc"},
	"opt.Free":  {"Free"},
}

// outcome is how a Backend call ended, once judged.
type outcome int

const (
	succeeded outcome = iota
	rejected          // failed as the model predicted
	faulted           // failed because of an injected fault (or an allowed OOM)
)

// judge checks a call's error against the model's prediction want (0: the
// call must succeed; otherwise the Kind it must fail with). Every error must
// be a *core.Error naming the call and carrying a fix.
func (r *runner) judge(call string, err error, want core.Kind) (outcome, error) {
	o, verr := r.judgeCall(call, err, want)
	if verr == nil {
		countOutcome(call, o)
	}
	return o, verr
}

// judgeCall is judge without the outcome count: it classifies err as a
// success, a predicted refusal or an injected failure, or returns why it is
// none of those.
func (r *runner) judgeCall(call string, err error, want core.Kind) (outcome, error) {
	fired := r.faultFired()
	if err == nil {
		if fired && r.packFallback() {
			// Documented: a packed transfer whose device staging runs out
			// of memory moves its copies by the per-copy path instead (or
			// packs after the allocator gave cached memory back).
			countOutcome(call+" (staging out of memory)", succeeded)
			return succeeded, nil
		}
		if fired && r.spareFallback() {
			// Documented: a readback that pins a second set of staging
			// for the calls after it does so as an optimization; a
			// failed pin is logged and the call succeeds (its bytes are
			// checked as for any other).
			countOutcome(call+" (spare staging not pinned)", succeeded)
			return succeeded, nil
		}
		// An allocation gives cached memory back and tries again.
		if fired && !r.recoveredOOM() {
			return 0, fmt.Errorf("%s: injected %v fired but the call succeeded", call, r.armed)
		}
		if want == core.KindBudget && r.cfg.shared {
			return succeeded, nil // other goroutines freed room meanwhile
		}
		if want != 0 {
			return 0, fmt.Errorf("%s succeeded; the model predicted %v", call, want)
		}
		return succeeded, nil
	}
	var e *core.Error
	if !errors.As(err, &e) {
		return 0, fmt.Errorf("%s: error %v (%T) is not a *core.Error", call, err, err)
	}
	if e.Op != call && !slices.Contains(opAliases[call], e.Op) || e.Fix == "" {
		return 0, fmt.Errorf("%s: error %q names op %q or has no fix", call, err, e.Op)
	}
	if e.Kind == core.KindDriver || budgetRefusal(e) {
		switch {
		case fired && r.packFallback():
			return 0, fmt.Errorf("%s: its packed staging allocation ran out of memory (injected %v) and the call failed; "+
				"the documented fallback is the per-copy path, which needs no device memory: %v", call, r.armed, err)
		case fired:
			if !r.armed.null && e.Code != r.armed.code {
				return 0, fmt.Errorf("%s: injected code %d but the error carries %d: %v", call, r.armed.code, e.Code, err)
			}
			coreStats.faulted.Add(1)
			r.q.faulted = true
			return faulted, nil
		case r.cfg.faults == faultsRandom:
			coreStats.faulted.Add(1)
			r.q.faulted = true
			return faulted, nil
		case r.allowOOM && e.Code == cudaapi.CUDA_ERROR_OUT_OF_MEMORY:
			return faulted, nil
		}
	}
	if fired {
		return 0, fmt.Errorf("%s: injected %v fired but the call failed with %v: %v", call, r.armed, e.Kind, err)
	}
	if want == 0 && r.cfg.shared && e.Kind == core.KindBudget {
		// Other goroutines allocate at the same time: any allocation may
		// find the budget spent.
		coreStats.rejected.Add(1)
		return rejected, nil
	}
	if want == 0 {
		return 0, fmt.Errorf("%s failed; the model predicted success: %v", call, err)
	}
	if e.Kind != want {
		return 0, fmt.Errorf("%s failed with %v; the model predicted %v: %v", call, e.Kind, want, err)
	}
	coreStats.rejected.Add(1)
	return rejected, nil
}

// packFallback reports whether the armed fault is an out-of-memory failure of
// a device allocation during a transfer that may be packed.
func (r *runner) packFallback() bool {
	return r.packable && r.armed != nil && r.armed.op == sim.OpMemAlloc && !r.armed.null &&
		r.armed.code == cudaapi.CUDA_ERROR_OUT_OF_MEMORY
}

// spareFallback reports whether the armed fault is a failed (or null)
// pinned host allocation during a readback, which may have hit the pinning
// of spare staging.
func (r *runner) spareFallback() bool {
	return r.spareable && r.armed != nil && r.armed.op == sim.OpHostAlloc
}

// callsDelta returns the device calls made since the step began.
func (r *runner) callsDelta() map[sim.Op]uint64 {
	d := make(map[sim.Op]uint64)
	for op, n := range r.dev.CallCounts() {
		if n > r.callsBefore[op] {
			d[op] = n - r.callsBefore[op]
		}
	}
	return d
}

// expectCalls checks the device calls of the step so far: exactly want for
// the ops in want, and none of any other op. Skipped in shared mode.
func (r *runner) expectCalls(what string, want map[sim.Op]uint64) error {
	if r.cfg.shared {
		return nil
	}
	got := r.callsDelta()
	r.dropRetries(got, want)
	if len(got) != len(want) {
		return fmt.Errorf("%s: device calls %v, want exactly %v", what, got, want)
	}
	for op, n := range want {
		if got[op] != n {
			return fmt.Errorf("%s: device calls %v, want exactly %v", what, got, want)
		}
	}
	return nil
}

// quarantineOps are the calls a retry of the quarantine makes: one
// StreamSynchronize per quarantined stream and, for an entry it releases,
// destroys of leases given back unhealthy and frees of staging its pools
// evict.
var quarantineOps = []sim.Op{sim.OpStreamSynchronize, sim.OpStreamDestroy, sim.OpEventDestroy, sim.OpHostFree, sim.OpMemFree}

// dropRetries removes from got the calls beyond want that retries of a
// quarantine may have made, when the step began with one: every lease
// acquisition, and Free of a buffer in flight, retries it first.
func (r *runner) dropRetries(got, want map[sim.Op]uint64) {
	if r.q.start == 0 {
		return
	}
	for _, op := range quarantineOps {
		if got[op] > want[op] {
			got[op] = want[op]
			if _, ok := want[op]; !ok {
				delete(got, op)
			}
		}
	}
}

// noCalls checks that a rejected or empty call did not touch the device.
func (r *runner) noCalls(what string) error { return r.expectCalls(what, nil) }

// pick resolves a step's handle number against the handles seen so far:
// mostly live handles, sometimes any handle seen (live or freed), and
// sometimes a special one that is never live: the zero Buffer, another
// Backend's live handle, an id never handed out, or a live handle with a
// drifted length.
func (r *runner) pick(p int) core.Buffer {
	p &= 1<<30 - 1
	class, p := p%16, p/16
	if class < 12 {
		var live []core.Buffer
		for _, h := range r.m.order {
			if r.m.valid(h) {
				live = append(live, h)
			}
		}
		if len(live) > 0 {
			return live[p%len(live)]
		}
	}
	n := len(r.m.order)
	if n > 0 && class < 15 {
		return r.m.order[p%n]
	}
	switch p % 4 {
	case 0:
		return core.Buffer{}
	case 1:
		return r.foreign
	case 2:
		return core.Buffer{ID: 1<<62 + uint64(p), Len: 1 + p%64}
	default:
		if n == 0 {
			return core.Buffer{ID: 1 << 61, Len: 8}
		}
		h := r.m.order[(p/4)%n]
		if p%2 == 0 || h.Len == 1 {
			h.Len++
		} else {
			h.Len--
		}
		return h
	}
}

// pickLive turns a drawn handle number into one that picks a live handle
// whenever there is one; batches mostly use such numbers, so that one bad
// item does not reject nearly every batch.
func pickLive(p int) int { return p - p%16 + p%12 }
