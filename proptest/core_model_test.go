package proptest

// This file holds the plain reference model the core.Backend properties check
// against. The runner that executes one step on a Backend and on the model
// together is in core_model_runner_test.go, its configuration in
// core_model_config_test.go, and the checks made after every step in
// core_model_checks_test.go.
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
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/vyre-go/vyrecuda/core"
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

// countOutcome adds one outcome of call to the per-call counts.
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

// logCoreStats logs what ran since before was taken and, when verbose, the
// cumulative outcomes per call.
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

// snapshotCoreStats reads the counters logCoreStats reports.
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

// ptr is the address of the slot's memory, as the Backend's pinning calls take it.
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

// newModel returns a model with no buffers.
func newModel() *model { return &model{bufs: make(map[uint64]*mbuf)} }

// residentBytes is the total length of the live buffers.
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

// markConflict records the bytes of x in b that a queued asynchronous
// upload also writes: their order is unknown until SynchronizeUploads.
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
