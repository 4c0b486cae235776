package proptest

// This file holds the plain reference model the core.Backend properties check
// against, the runner that executes one step on a Backend and on the model
// together, and the checks made after every step.
//
// Why the model lives in the runner and not in gopter's State: a command's
// NextState cannot see what Run returned, but whether a step succeeds can
// depend on the device (an injected fault, a pooled bucket that no longer fits
// the free memory, another goroutine's allocations). So the gopter State only
// counts steps, every step names its handles by a number resolved against the
// handles seen so far (which keeps sequences valid when gopter shrinks them),
// and the runner advances the model on the observed outcome after checking
// that the outcome was one the model allowed.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math/bits"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// Knobs. CI runs a fixed seed at a size that keeps these properties to well
// under two minutes of `make test` on a 2-core machine; the long mode is for
// runs as long as `make fuzz`.
const (
	coreDefaultSeed = 20250601
	coreSeedEnv     = "VYRECUDA_PROP_SEED"
	coreLongEnv     = "VYRECUDA_PROP_LONG"
)

var coreLongFlag = flag.Bool("prop.long", false, "run the core.Backend properties at fuzz-run length (also: "+coreLongEnv+"=1)")

// coreLong reports whether the long mode is on.
func coreLong() bool { return *coreLongFlag || os.Getenv(coreLongEnv) != "" }

// coreSeed returns the seed for test name and arranges for it, and the one
// command that reproduces a failure, to be printed when the test fails.
func coreSeed(t *testing.T) int64 {
	t.Helper()
	seed := int64(coreDefaultSeed)
	if s := os.Getenv(coreSeedEnv); s != "" {
		v, err := strconv.ParseInt(s, 0, 64)
		if err != nil {
			t.Fatalf("%s=%q is not an integer: %v", coreSeedEnv, s, err)
		}
		seed = v
	}
	name := t.Name()
	t.Cleanup(func() {
		if t.Failed() {
			long := ""
			if coreLong() {
				long = " " + coreLongEnv + "=1"
			}
			t.Logf("seed %d; reproduce with: %s=%d%s go test -race -count=1 -run '^%s$' ./proptest",
				seed, coreSeedEnv, seed, long, name)
		}
	})
	return seed
}

// coreStats counts what the properties ran, for the logs and the report.
var coreStats struct {
	sequences, steps, rejected, faulted atomic.Int64
	// Steps that left the quarantine holding leases, and steps that began
	// with it holding some and drained it.
	quarantined, drained atomic.Int64

	mu       sync.Mutex
	outcomes map[string]*[3]int64 // per call: succeeded, rejected, faulted
}

func countOutcome(call string, o outcome) {
	coreStats.mu.Lock()
	defer coreStats.mu.Unlock()
	if coreStats.outcomes == nil {
		coreStats.outcomes = make(map[string]*[3]int64)
	}
	c := coreStats.outcomes[call]
	if c == nil {
		c = new([3]int64)
		coreStats.outcomes[call] = c
	}
	c[o]++
}

func logCoreStats(t *testing.T, before [6]int64) {
	now := snapshotCoreStats()
	t.Logf("ran %d sequences, %d steps (%d rejected as predicted, %d failed by injected faults; "+
		"%d left a quarantine, %d drained one)",
		now[0]-before[0], now[1]-before[1], now[2]-before[2], now[3]-before[3], now[4]-before[4], now[5]-before[5])
	if testing.Verbose() {
		coreStats.mu.Lock()
		defer coreStats.mu.Unlock()
		calls := make([]string, 0, len(coreStats.outcomes))
		for c := range coreStats.outcomes {
			calls = append(calls, c)
		}
		sort.Strings(calls)
		for _, c := range calls {
			o := coreStats.outcomes[c]
			t.Logf("  %-28s ok %6d  rejected %6d  faulted %6d (cumulative)", c, o[0], o[1], o[2])
		}
	}
}

func snapshotCoreStats() [6]int64 {
	return [6]int64{coreStats.sequences.Load(), coreStats.steps.Load(), coreStats.rejected.Load(), coreStats.faulted.Load(),
		coreStats.quarantined.Load(), coreStats.drained.Load()}
}

// span is the byte interval [off, end).
type span struct{ off, end int }

// spans is a sorted list of disjoint, non-touching spans.
type spans []span

// add returns s with x merged in.
func (s spans) add(x span) spans {
	if x.end <= x.off {
		return s
	}
	out := make(spans, 0, len(s)+1)
	for _, y := range s {
		if y.end < x.off || y.off > x.end {
			out = append(out, y)
			continue
		}
		x = span{min(x.off, y.off), max(x.end, y.end)}
	}
	out = append(out, x)
	sort.Slice(out, func(i, j int) bool { return out[i].off < out[j].off })
	return out
}

// remove returns s without the bytes of x.
func (s spans) remove(x span) spans {
	out := make(spans, 0, len(s)+1)
	for _, y := range s {
		if y.end <= x.off || y.off >= x.end {
			out = append(out, y)
			continue
		}
		if y.off < x.off {
			out = append(out, span{y.off, x.off})
		}
		if y.end > x.end {
			out = append(out, span{x.end, y.end})
		}
	}
	return out
}

// overlaps reports whether any span of s shares a byte with x.
func (s spans) overlaps(x span) bool {
	for _, y := range s {
		if y.off < x.end && x.off < y.end {
			return true
		}
	}
	return false
}

// unionStats is the copy-fusion expectation, computed from the documented
// contract of package fusion rather than by calling it: copies of one handle
// whose ranges overlap or touch become one copy, copies of different handles
// never merge, and the bytes moved are the union of the requested bytes per
// handle. It returns those bytes and the number of copies.
func unionStats(byHandle map[uint64][]span) (bytes uint64, copies int) {
	for _, list := range byHandle {
		var u spans
		for _, x := range list {
			u = u.add(x)
		}
		for _, x := range u {
			bytes += uint64(x.end - x.off)
		}
		copies += len(u)
	}
	return bytes, copies
}

// mbuf is the model of one live resident buffer.
type mbuf struct {
	h    core.Buffer
	ptr  uint64 // device address, for auditing device memory directly
	data []byte // expected bytes wherever they are known
	// unknown holds bytes whose value the model does not know: fresh
	// buffers (Alloc does not promise zeros; pooled memory is
	// reused) and the destinations of a synchronous upload that failed after
	// some copies may have landed.
	unknown spans
	// conflict holds bytes written synchronously while an asynchronous
	// upload to them was queued: the two are not ordered, so after
	// SynchronizeUploads their value is unknown.
	conflict spans
	asyncN   int // queued asynchronous uploads into this buffer
	dispN    int // unfinished dispatches binding this buffer
	graphN   int // open Graphs naming this buffer (core_graph_test.go)
}

// inFlight reports whether Free must refuse the buffer.
func (b *mbuf) inFlight() bool { return b.asyncN+b.dispN+b.graphN > 0 }

// dispatch is one DispatchAsync of ProgramFillU32 (dst) or
// ProgramCopyU32 (src, dst) and its Pending.
type dispatch struct {
	p       *core.Pending
	fill    bool
	value   uint32
	src     uint64 // copy: the source buffer
	dst     uint64
	n       int // bytes the kernel writes: 4 * (dst length / 4)
	timing  bool
	ids     []uint64 // bound buffers, in flight until completion
	dirty   bool     // its source or destination was written while it was queued
	settled bool
	err     error // the failure it settled with
}

// asyncWrite is one queued UploadAsync.
type asyncWrite struct {
	id   uint64
	off  int
	data []byte // the source bytes; the source is not changed while queued
	slot *pinSlot
}

// pinSlot is one piece of host memory pinned (or once pinned) through a
// Backend: an AllocHostPinned buffer or Go memory registered with
// PinHostBuffer.
type pinSlot struct {
	alloc   bool               // AllocHostPinned; else PinHostBuffer of mem
	pb      *core.PinnedBuffer // when alloc
	mem     []byte             // the memory; for alloc, Bytes() while live
	room    []byte             // mem's start to the end of the Go allocation holding it (PinHostBuffer of part of one), else nil
	gen     int                // the Backend generation it was pinned through
	live    bool
	pending int // queued asynchronous uploads reading it
}

func (p *pinSlot) ptr() unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(p.mem)) }

// model is the reference state of one owner's buffers: everything the
// runner has been handed, what is live, and the telemetry the owner's
// successful calls should have produced.
type model struct {
	bufs   map[uint64]*mbuf
	order  []core.Buffer // every handle ever returned, live or not, for picks
	pinned []*pinSlot
	async  []asyncWrite
	disp   []*dispatch // every dispatch of the current Backend, settled or not
	graphs []*mgraph   // open Graphs of the current Backend (core_graph_test.go)
	tel    core.Telemetry
	// packable counts, in shared mode, transfers that may have been packed:
	// tel then holds their plain-path DeviceCopies, an upper bound.
	packable uint64
	// stageable counts, in shared mode, single-copy transfers that may
	// have been staged in chunks (a DMA per chunk, a wait per block).
	stageable uint64
	// qspans holds, per buffer, the bytes that work of a failed call may
	// still write once the Backend's quarantine drains it (see quarModel);
	// qActive is set while a step runs with a non-empty quarantine. A write
	// into those bytes then is not ordered against that work, so the model
	// forgets them.
	qspans  map[uint64]spans
	qActive bool
}

// queued returns the dispatches not settled yet.
func (m *model) queued() []*dispatch {
	var q []*dispatch
	for _, d := range m.disp {
		if !d.settled {
			q = append(q, d)
		}
	}
	return q
}

func newModel() *model { return &model{bufs: make(map[uint64]*mbuf)} }

func (m *model) residentBytes() uint64 {
	var n uint64
	for _, b := range m.bufs {
		n += uint64(b.h.Len)
	}
	return n
}

// valid reports whether h names a live buffer of the model exactly.
func (m *model) valid(h core.Buffer) bool {
	b := m.bufs[h.ID]
	return b != nil && b.h.Len == h.Len
}

// asyncSpans returns the bytes of buffer id that queued asynchronous
// uploads will write.
func (m *model) asyncSpans(id uint64) spans {
	var s spans
	for _, w := range m.async {
		if w.id == id {
			s = s.add(span{w.off, w.off + len(w.data)})
		}
	}
	return s
}

// racySpans returns the bytes of buffer id that queued work (asynchronous
// uploads, unfinished dispatches) will write: racy to read until it is
// waited for.
func (m *model) racySpans(id uint64) spans {
	s := m.asyncSpans(id)
	for _, d := range m.queued() {
		if d.dst == id {
			s = s.add(span{0, d.n})
		}
	}
	return m.graphRacySpans(id, s)
}

// touch records a write of x in buffer id: an unfinished dispatch that
// reads or writes those bytes is no longer ordered against it.
func (m *model) touch(id uint64, x span) {
	for _, d := range m.queued() {
		if (d.dst == id || !d.fill && d.src == id) && x.off < d.n && d.n > 0 && x.end > x.off {
			d.dirty = true
		}
	}
	m.touchGraphs(id, x)
}

// write records a synchronous write that succeeded.
func (m *model) write(id uint64, off int, data []byte) {
	b := m.bufs[id]
	x := span{off, off + len(data)}
	copy(b.data[off:], data)
	b.unknown = b.unknown.remove(x)
	m.markConflict(b, x)
	m.touch(id, x)
	m.forgetQuarantined(id, x)
}

// forgetQuarantined forgets the bytes of x in buffer id that quarantined
// work may still overwrite, when the step runs with a quarantine.
func (m *model) forgetQuarantined(id uint64, x span) {
	if !m.qActive {
		return
	}
	b := m.bufs[id]
	for _, q := range m.qspans[id] {
		if o := (span{max(q.off, x.off), min(q.end, x.end)}); o.off < o.end {
			b.unknown = b.unknown.add(o)
		}
	}
}

// forget records that the bytes of x may have been written with anything.
func (m *model) forget(id uint64, x span) {
	b := m.bufs[id]
	if b == nil || x.end <= x.off {
		return
	}
	b.unknown = b.unknown.add(x)
	m.markConflict(b, x)
	m.touch(id, x)
}

func (m *model) markConflict(b *mbuf, x span) {
	if b.asyncN == 0 {
		return
	}
	for _, p := range m.asyncSpans(b.h.ID) {
		o := span{max(p.off, x.off), min(p.end, x.end)}
		if o.off < o.end {
			b.conflict = b.conflict.add(o)
		}
	}
}

// synchronized applies every queued asynchronous upload, in queue order.
func (m *model) synchronized() {
	for _, w := range m.async {
		b := m.bufs[w.id]
		copy(b.data[w.off:], w.data)
		b.unknown = b.unknown.remove(span{w.off, w.off + len(w.data)})
		m.touch(w.id, span{w.off, w.off + len(w.data)})
		m.forgetQuarantined(w.id, span{w.off, w.off + len(w.data)})
		w.slot.pending = 0
	}
	for _, b := range m.bufs {
		for _, c := range b.conflict {
			b.unknown = b.unknown.add(c)
		}
		b.conflict, b.asyncN = nil, 0
	}
	m.async = nil
}

// settle records that dispatch d finished: ok says it ran (its effect is
// applied), otherwise its destination bytes are unknown.
func (m *model) settle(d *dispatch, ok bool, err error) {
	d.settled, d.err = true, err
	for _, id := range d.ids {
		m.bufs[id].dispN--
	}
	x := span{0, d.n}
	if !ok || d.dirty {
		m.forget(d.dst, x)
		return
	}
	if d.fill {
		data := make([]byte, d.n)
		for i := 0; i+4 <= d.n; i += 4 {
			binary.LittleEndian.PutUint32(data[i:], d.value)
		}
		m.write(d.dst, 0, data)
		return
	}
	src := m.bufs[d.src]
	if src.unknown.overlaps(x) || m.racySpans(d.src).overlaps(x) {
		m.forget(d.dst, x)
		return
	}
	m.write(d.dst, 0, bytes.Clone(src.data[:d.n]))
}

// checkBytes compares got, read from [off, off+len(got)) of buffer id, with
// every byte the model knows there.
func (m *model) checkBytes(id uint64, off int, got []byte) error {
	b := m.bufs[id]
	skip := b.unknown
	for _, p := range m.racySpans(id) {
		skip = skip.add(p)
	}
	at := off
	end := off + len(got)
	check := func(x span) error {
		if x.off >= x.end {
			return nil
		}
		if g, w := got[x.off-off:x.end-off], b.data[x.off:x.end]; !bytes.Equal(g, w) {
			i := 0
			for g[i] == w[i] {
				i++
			}
			return fmt.Errorf("handle %d byte %d: read %#x, model has %#x (bytes [%d,%d) checked)",
				id, x.off+i, g[i], w[i], x.off, x.end)
		}
		return nil
	}
	for _, s := range skip {
		if s.end <= at || s.off >= end {
			continue
		}
		if err := check(span{at, min(s.off, end)}); err != nil {
			return err
		}
		at = max(at, s.end)
	}
	return check(span{at, end})
}

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

// budgetTotal is 9/10 of total device memory rounded down (the documented
// total resident budget), computed here without package accounting.
func budgetTotal(total uint64) uint64 {
	hi, lo := bits.Mul64(total, 9)
	q, _ := bits.Div64(hi, lo, 10)
	return q
}

// budgetLeft is what the contract promises an allocation right now: the
// total budget less the device bytes the Backend holds for live buffers and
// in-use staging (what the device holds, less what the Backend's cache
// keeps, which counts as available). An allocation of at most this many
// bytes must succeed; a larger one must fail with ErrBudget.
func (r *runner) budgetLeft() uint64 {
	devCached := r.b.MemoryStats().CachedDevice
	held := r.dev.Live().DeviceBytes - min(devCached, r.dev.Live().DeviceBytes)
	return budgetTotal(r.cfg.total) - min(held, budgetTotal(r.cfg.total))
}

// checkReserved checks MemoryStats against the model: the bytes live
// buffers reserve lie between their lengths and 9/8 of them (the rounding
// bound), and Reserved stays within the budget. It returns the bytes the
// live buffers reserve.
func (r *runner) checkReserved(devCached uint64) (uint64, error) {
	st := r.b.MemoryStats()
	alloc := r.b.MemoryStats().Allocated
	if st.Allocated != alloc || st.CachedDevice != devCached {
		return 0, fmt.Errorf("MemoryStats %+v disagrees with a second reading: Allocated %d, CachedDevice %d", st, alloc, devCached)
	}
	if st.Reserved > budgetTotal(r.cfg.total) || st.Reserved < devCached {
		return 0, fmt.Errorf("reserved %d bytes (%d cached) outside the budget %d", st.Reserved, devCached, budgetTotal(r.cfg.total))
	}
	held := st.Reserved - devCached
	// Staging that quarantined work still holds is reserved too.
	quarantined := r.b.LaunchResourceCounts().Quarantined > 0
	if held < alloc || (held-alloc)*8 > alloc && !quarantined {
		return 0, fmt.Errorf("live buffers of %d bytes reserve %d bytes: more than 1/8 rounding", alloc, held)
	}
	return held, nil
}

// checkGlobal is run after every step (single-owner mode): accounting equals
// the model, the budget holds, telemetry moved exactly as the model says,
// and the device holds exactly what the Backend owns, so nothing leaked.
func (r *runner) checkGlobal() error {
	m := r.m
	if r.cfg.faults == faultsOff {
		if err := r.log.check(); err != nil {
			return err
		}
	}
	if r.opt != nil {
		if err := r.checkOptimizer(); err != nil {
			return err
		}
	} else if got, want := r.b.MemoryStats().Allocated, m.residentBytes(); got != want {
		return fmt.Errorf("MemoryStats.Allocated %d, live buffers hold %d", got, want)
	}
	if got, tb := r.b.MemoryStats().Allocated, budgetTotal(r.cfg.total); got > tb {
		return fmt.Errorf("resident bytes %d exceed the total budget %d", got, tb)
	}
	if got := r.b.Telemetry(); got != m.tel {
		return fmt.Errorf("telemetry %+v, model expects %+v", got, m.tel)
	}
	// The cached bytes first: reading them waits for staging still being evicted after
	// a readback returned, which holds its pinned block until then.
	devCached, hostCached := r.b.MemoryStats().CachedDevice, r.b.MemoryStats().CachedPinned
	live := r.dev.Live()
	devWant, err := r.checkReserved(devCached)
	if err != nil {
		return err
	}
	var pinnedWant uint64
	regs := 0
	for _, p := range m.pinned {
		if p.live && p.gen == r.gen {
			if p.alloc {
				pinnedWant += uint64(len(p.mem))
			} else {
				regs++
			}
		}
	}
	held, heldEvents := 0, 0
	if len(m.async) > 0 {
		held, heldEvents = 1, 1
	}
	queuedDisp := m.queued()
	for _, d := range queuedDisp {
		held++
		heldEvents++
		if d.timing {
			heldEvents += 2
		}
	}
	gr := m.graphResidue()
	pinnedWant += gr.pinned
	held += gr.leases
	heldEvents += gr.events
	lrc := r.b.LaunchResourceCounts()
	var problems []string
	// What the quarantine holds is the residue beyond everything else.
	quar := lrc.Quarantined
	devRes := int64(live.DeviceBytes) - int64(devWant+devCached)
	pinRes := int64(live.PinnedBytes) - int64(pinnedWant+hostCached)
	evRes := live.Events - (lrc.CompletionEvents.Idle + lrc.TimingEvents.Idle + heldEvents)
	// Each queued asynchronous upload is one queued copy; a queued dispatch
	// adds its launch and event records (how many depends on timing and
	// pooled state), so with dispatches queued only a lower bound holds.
	queuedRes := live.QueuedOps - len(m.async) - 2*len(queuedDisp) - gr.queued
	if quar == 0 {
		if devRes != 0 {
			problems = append(problems, fmt.Sprintf("device bytes %d, want %d in buffers + %d pooled", live.DeviceBytes, devWant, devCached))
		}
		if pinRes != 0 {
			problems = append(problems, fmt.Sprintf("pinned bytes %d, want %d caller buffers + %d pooled staging", live.PinnedBytes, pinnedWant, hostCached))
		}
		if evRes != 0 {
			problems = append(problems, fmt.Sprintf("events live %d, pool %+v %+v, async lease %d", live.Events, lrc.CompletionEvents, lrc.TimingEvents, held))
		}
		if len(queuedDisp) == 0 && queuedRes != 0 || queuedRes < 0 {
			problems = append(problems, fmt.Sprintf("queued device ops %d, want %d queued async uploads and %d dispatches", live.QueuedOps, len(m.async), len(queuedDisp)))
		}
	} else {
		// A quarantined lease is one stream, its completion event and,
		// for timed work, two timing events; its queued work may use
		// staging (pinned and device) and queued copies, never less than
		// nothing.
		if devRes < 0 || pinRes < 0 || queuedRes < 0 {
			problems = append(problems, fmt.Sprintf("with %d quarantined lease(s): device bytes %d (want %d buffers + %d pooled + quarantined staging), "+
				"pinned %d (want %d + %d pooled + quarantined staging), queued ops %d (want %d async + at least 2 per %d dispatches + quarantined work)",
				quar, live.DeviceBytes, devWant, devCached, live.PinnedBytes, pinnedWant, hostCached, live.QueuedOps, len(m.async), len(queuedDisp)))
		}
		if evRes < quar || evRes > 3*quar || (evRes-quar)%2 != 0 {
			problems = append(problems, fmt.Sprintf("events live %d, pool %+v %+v, leases out %d: %d event(s) for %d quarantined lease(s)",
				live.Events, lrc.CompletionEvents, lrc.TimingEvents, held, evRes, quar))
		}
	}
	if !r.q.faulted {
		// Only a call that fails can quarantine: any other step may only
		// shrink what the quarantine holds (a retry that synchronizes).
		prevQueued := r.q.queued
		if len(queuedDisp) > 0 || prevQueued < 0 {
			prevQueued = max(queuedRes, 0)
		}
		if quar > r.q.start || devRes > int64(r.q.dev) || pinRes > int64(r.q.pinned) || evRes > r.q.events || max(queuedRes, 0) > prevQueued {
			problems = append(problems, fmt.Sprintf("the quarantine grew in a step that did not fail: leases %d -> %d, device bytes %d -> %d, "+
				"pinned bytes %d -> %d, events %d -> %d, queued ops %d -> %d", r.q.start, quar, r.q.dev, devRes, r.q.pinned, pinRes,
				r.q.events, evRes, r.q.queued, queuedRes))
		}
	}
	if live.RegisteredRanges != regs {
		problems = append(problems, fmt.Sprintf("registered ranges %d, want %d", live.RegisteredRanges, regs))
	}
	if lrc.Leases != held+quar {
		problems = append(problems, fmt.Sprintf("launch leases %d, want %d + %d quarantined", lrc.Leases, held, quar))
	}
	if live.Streams != lrc.Streams.Idle+held+quar || uint64(live.Streams) != lrc.Streams.Created-lrc.Streams.Destroyed {
		problems = append(problems, fmt.Sprintf("streams live %d, pool %+v, leases out %d + %d quarantined", live.Streams, lrc.Streams, held, quar))
	}
	evNet := lrc.CompletionEvents.Created - lrc.CompletionEvents.Destroyed + lrc.TimingEvents.Created - lrc.TimingEvents.Destroyed
	if uint64(live.Events) != evNet {
		problems = append(problems, fmt.Sprintf("events live %d, pool %+v %+v", live.Events, lrc.CompletionEvents, lrc.TimingEvents))
	}
	if len(problems) == 0 {
		r.noteQuarantine(quar, devRes, pinRes, evRes, queuedRes, len(queuedDisp) > 0)
	}
	// The built-in programs, plus the scatter and gather kernels of packed
	// transfers.
	if live.Modules > len(builtinPrograms)+2 {
		problems = append(problems, fmt.Sprintf("modules %d for %d programs and the packing kernels", live.Modules, len(builtinPrograms)))
	}
	if len(problems) > 0 {
		return fmt.Errorf("device and Backend disagree (leak or lost accounting): %s; live: %s", strings.Join(problems, "; "), live)
	}
	return nil
}

// noteQuarantine records the residue a step left, and the buffers and
// bytes quarantined work may still use: a failed call's targets when the
// step ends with a quarantine (its work may run later, so the bytes it may
// write are unknown again), nothing once the quarantine is empty (every
// quarantined copy has completed or been dropped with its stream).
func (r *runner) noteQuarantine(quar int, devRes, pinRes int64, evRes, queuedRes int, dispatches bool) {
	r.q.dev, r.q.pinned, r.q.events, r.q.queued = uint64(devRes), uint64(pinRes), evRes, queuedRes
	if dispatches {
		r.q.queued = -1
	}
	if quar == 0 {
		if r.q.start > 0 {
			coreStats.drained.Add(1)
		}
		r.q.ids, r.m.qspans = nil, nil
		return
	}
	coreStats.quarantined.Add(1)
	if r.q.ids == nil {
		r.q.ids, r.m.qspans = make(map[uint64]bool), make(map[uint64]spans)
	}
	for id, sp := range r.q.step {
		if r.m.bufs[id] == nil {
			continue
		}
		r.q.ids[id] = true
		for _, x := range sp {
			r.m.qspans[id] = r.m.qspans[id].add(x)
			r.m.forget(id, x)
		}
	}
}

// audit reads buffer id straight from simulated device memory, bypassing the
// Backend, and compares it with the model.
func (r *runner) audit(id uint64) error {
	b := r.m.bufs[id]
	if b == nil {
		return nil
	}
	got, err := r.dev.ReadDevice(b.ptr, b.h.Len)
	if err != nil {
		return fmt.Errorf("audit of handle %d at %#x: %v", id, b.ptr, err)
	}
	if err := r.m.checkBytes(id, 0, got); err != nil {
		return fmt.Errorf("device memory (read directly): %w", err)
	}
	return nil
}

// closeAndCheck synchronizes what is queued, closes the Backend and checks
// that Close released everything and that the closed Backend refuses calls.
// Faults are disarmed first: this is the end of a sequence, not a step
// under test.
func (r *runner) closeAndCheck() error {
	r.dev.ClearFaults()
	if err := r.drainProbe(); err != nil {
		return err
	}
	if err := r.settleAll(); err != nil {
		return err
	}
	for id := range r.m.bufs {
		if err := r.audit(id); err != nil {
			return err
		}
	}
	if r.opt != nil {
		if err := r.opt.d.Close(); err != nil {
			return fmt.Errorf("OptimizerDispatcher.Close: %v", err)
		}
		if got, want := r.b.MemoryStats().Allocated, r.m.residentBytes(); got != want {
			return fmt.Errorf("after OptimizerDispatcher.Close resident bytes are %d, the runner's buffers %d", got, want)
		}
		if _, err := r.opt.d.Alloc(1); !errors.Is(err, core.ErrClosed) {
			return fmt.Errorf("Alloc after the dispatcher's Close: %v, want ErrClosed", err)
		}
		r.opt = nil
	}
	tel := r.b.Telemetry()
	if err := r.b.Close(); err != nil {
		return fmt.Errorf("Close: %v", err)
	}
	if l := r.dev.Live(); !l.Zero() {
		return fmt.Errorf("after Close the device still holds: %s", l)
	}
	if err := r.b.Close(); !errors.Is(err, core.ErrClosed) {
		return fmt.Errorf("second Close returned %v, want ErrClosed", err)
	}
	if _, err := r.b.Alloc(1); !errors.Is(err, core.ErrClosed) {
		return fmt.Errorf("Alloc after Close returned %v, want ErrClosed", err)
	}
	if got := r.b.Telemetry(); got != tel {
		return fmt.Errorf("telemetry changed by Close: %+v, was %+v", got, tel)
	}
	for _, p := range r.m.pinned {
		if p.alloc && p.gen == r.gen {
			if p.pb.Bytes() != nil {
				return fmt.Errorf("pinned buffer still has bytes after Close")
			}
			if err := p.pb.Free(); !errors.Is(err, core.ErrClosed) {
				return fmt.Errorf("PinnedBuffer.Free after Close returned %v, want ErrClosed", err)
			}
		}
		if p.gen == r.gen {
			p.live, p.pending = false, 0
		}
	}
	if l := r.dev.Live(); !l.Zero() {
		return fmt.Errorf("calls after Close left objects on the device: %s", l)
	}
	return nil
}

// drainProbe proves that a later call's lease acquisition drains the
// quarantine once synchronizations succeed again (faults are disarmed): a
// one-byte read of a live buffer must leave no quarantined lease and no
// residue. Without a live buffer Close is what drains it.
func (r *runner) drainProbe() error {
	if r.cfg.shared || r.b.LaunchResourceCounts().Quarantined == 0 {
		return nil
	}
	var h core.Buffer
	for _, x := range r.m.order {
		if r.m.valid(x) {
			h = x
			break
		}
	}
	if h.ID == 0 {
		return r.drainThroughDispatcher()
	}
	r.q.start, r.q.faulted = r.b.LaunchResourceCounts().Quarantined, false
	got, err := r.b.Download(h.Slice(0, 1), nil)
	if err != nil {
		return fmt.Errorf("Download after faults were disarmed, with %d quarantined lease(s): %v", r.q.start, err)
	}
	if q := r.b.LaunchResourceCounts().Quarantined; q != 0 {
		return fmt.Errorf("a lease acquisition with faults disarmed left %d of %d quarantined lease(s)", q, r.q.start)
	}
	if err := r.m.checkBytes(h.ID, 0, got); err != nil {
		return fmt.Errorf("drain probe read: %w", err)
	}
	t := &r.m.tel
	t.DeviceToHostBytes++
	t.ReadbackOps++
	t.SyncPoints++
	t.RequestedCopies++
	t.DeviceCopies++
	if err := r.checkGlobal(); err != nil {
		return fmt.Errorf("after the quarantine drained: %w", err)
	}
	return nil
}

// settleAll waits for every dispatch and asynchronous upload still queued,
// as a caller must before Close.
func (r *runner) settleAll() error {
	if err := r.closeGraphs(); err != nil {
		return err
	}
	for _, d := range r.m.queued() {
		if err := d.p.Close(); err != nil {
			return fmt.Errorf("Pending.Close before Close: %v", err)
		}
		r.m.settle(d, true, nil)
		r.m.tel.SyncPoints++
	}
	if len(r.m.async) > 0 {
		if err := r.b.SynchronizeUploads(); err != nil {
			return fmt.Errorf("SynchronizeUploads before Close: %v", err)
		}
		r.m.synchronized()
		r.m.tel.SyncPoints++
	}
	return nil
}

// reopen opens a new Backend on the same device after closeAndCheck. Old
// handles stay in the pick list: the new Backend must refuse every one.
func (r *runner) reopen() error {
	b, err := core.Open(r.dev, r.cfg.options(r.log)...)
	if err != nil {
		return err
	}
	r.b = b
	r.gen++
	r.m.bufs = make(map[uint64]*mbuf)
	r.m.async = nil
	r.m.disp = nil
	r.m.graphs = nil
	r.m.tel = core.Telemetry{}
	r.m.qspans, r.m.qActive = nil, false
	r.q = quarModel{}
	r.armRandom()
	return nil
}
