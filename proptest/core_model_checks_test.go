package proptest

// The checks made after every step and at the end of a sequence: the
// Backend's accounting and telemetry against the model, the device's live
// objects against what the model explains (the residue is what the
// quarantine holds), direct audits of device memory, and the Close that ends
// a sequence, with the reopen that may follow it.

import (
	"errors"
	"fmt"
	"math/bits"
	"strings"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

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
	if err := r.checkAccounting(); err != nil {
		return err
	}
	// The cached bytes first: reading them waits for staging still being evicted after
	// a readback returned, which holds its pinned block until then.
	devCached, hostCached := r.b.MemoryStats().CachedDevice, r.b.MemoryStats().CachedPinned
	live := r.dev.Live()
	devWant, err := r.checkReserved(devCached)
	if err != nil {
		return err
	}
	w := r.explain(devWant, devCached, hostCached)
	lrc := r.b.LaunchResourceCounts()
	// What the quarantine holds is the residue beyond everything else.
	res := w.residue(live, lrc)
	problems := w.residueProblems(live, lrc, res)
	if !r.q.faulted {
		// Only a call that fails can quarantine: any other step may only
		// shrink what the quarantine holds (a retry that synchronizes).
		problems = append(problems, r.growthProblems(w, res)...)
	}
	problems = append(problems, w.poolProblems(live, lrc, res.quar)...)
	if len(problems) == 0 {
		r.noteQuarantine(res.quar, res.dev, res.pin, res.events, res.queued, w.dispatches > 0)
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

// checkAccounting checks, in this order, that a run without faults logged
// nothing, that the resident bytes are those of the live buffers (or that
// the dispatcher's accounting holds), that they fit the total budget, and
// that the telemetry is the model's.
func (r *runner) checkAccounting() error {
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
	return nil
}

// explained is what the model accounts for on the device after a step.
type explained struct {
	dev, devCached     uint64 // device bytes reserved for live buffers, and cached by the Backend
	pinned, hostCached uint64 // pinned bytes of caller buffers and open Graphs, and cached staging
	regs               int    // registered host ranges of the current Backend
	held, heldEvents   int    // launch leases held by queued work, and their events
	async, dispatches  int    // queued asynchronous uploads, and unfinished dispatches
	graphQueued        int    // device ops queued by open Graphs
}

// explain gathers what the model accounts for, given the device bytes live
// buffers reserve and the bytes the Backend caches on the device and in
// pinned memory: a queued asynchronous upload holds one lease and its
// event, an unfinished dispatch one lease and one event (three when timed),
// and open Graphs what graphResidue says.
func (r *runner) explain(devWant, devCached, hostCached uint64) explained {
	m := r.m
	w := explained{dev: devWant, devCached: devCached, hostCached: hostCached}
	for _, p := range m.pinned {
		if p.live && p.gen == r.gen {
			if p.alloc {
				w.pinned += uint64(len(p.mem))
			} else {
				w.regs++
			}
		}
	}
	if len(m.async) > 0 {
		w.held, w.heldEvents = 1, 1
	}
	queuedDisp := m.queued()
	for _, d := range queuedDisp {
		w.held++
		w.heldEvents++
		if d.timing {
			w.heldEvents += 2
		}
	}
	gr := m.graphResidue()
	w.pinned += gr.pinned
	w.held += gr.leases
	w.heldEvents += gr.events
	w.async, w.dispatches, w.graphQueued = len(m.async), len(queuedDisp), gr.queued
	return w
}

// residue is what the device holds beyond what the model explains, with
// the count of quarantined leases that may account for it.
type residue struct {
	quar     int   // quarantined leases
	dev, pin int64 // device and pinned bytes
	events   int
	queued   int // queued device ops; with dispatches queued, a lower bound
}

// residue measures what live and lrc hold beyond w.
func (w explained) residue(live sim.Live, lrc core.LaunchResourceCounts) residue {
	return residue{
		quar:   lrc.Quarantined,
		dev:    int64(live.DeviceBytes) - int64(w.dev+w.devCached),
		pin:    int64(live.PinnedBytes) - int64(w.pinned+w.hostCached),
		events: live.Events - (lrc.CompletionEvents.Idle + lrc.TimingEvents.Idle + w.heldEvents),
		// Each queued asynchronous upload is one queued copy; a queued dispatch
		// adds its launch and event records (how many depends on timing and
		// pooled state), so with dispatches queued only a lower bound holds.
		queued: live.QueuedOps - w.async - 2*w.dispatches - w.graphQueued,
	}
}

// residueProblems checks the residue: without quarantined leases there must
// be none; with some it must never be negative, and it must hold one or
// three events per quarantined lease.
func (w explained) residueProblems(live sim.Live, lrc core.LaunchResourceCounts, res residue) []string {
	var problems []string
	quar := res.quar
	if quar == 0 {
		if res.dev != 0 {
			problems = append(problems, fmt.Sprintf("device bytes %d, want %d in buffers + %d pooled", live.DeviceBytes, w.dev, w.devCached))
		}
		if res.pin != 0 {
			problems = append(problems, fmt.Sprintf("pinned bytes %d, want %d caller buffers + %d pooled staging", live.PinnedBytes, w.pinned, w.hostCached))
		}
		if res.events != 0 {
			problems = append(problems, fmt.Sprintf("events live %d, pool %+v %+v, async lease %d", live.Events, lrc.CompletionEvents, lrc.TimingEvents, w.held))
		}
		if w.dispatches == 0 && res.queued != 0 || res.queued < 0 {
			problems = append(problems, fmt.Sprintf("queued device ops %d, want %d queued async uploads and %d dispatches", live.QueuedOps, w.async, w.dispatches))
		}
	} else {
		// A quarantined lease is one stream, its completion event and,
		// for timed work, two timing events; its queued work may use
		// staging (pinned and device) and queued copies, never less than
		// nothing.
		if res.dev < 0 || res.pin < 0 || res.queued < 0 {
			problems = append(problems, fmt.Sprintf("with %d quarantined lease(s): device bytes %d (want %d buffers + %d pooled + quarantined staging), "+
				"pinned %d (want %d + %d pooled + quarantined staging), queued ops %d (want %d async + at least 2 per %d dispatches + quarantined work)",
				quar, live.DeviceBytes, w.dev, w.devCached, live.PinnedBytes, w.pinned, w.hostCached, live.QueuedOps, w.async, w.dispatches))
		}
		if res.events < quar || res.events > 3*quar || (res.events-quar)%2 != 0 {
			problems = append(problems, fmt.Sprintf("events live %d, pool %+v %+v, leases out %d: %d event(s) for %d quarantined lease(s)",
				live.Events, lrc.CompletionEvents, lrc.TimingEvents, w.held, res.events, quar))
		}
	}
	return problems
}

// growthProblems checks that the residue did not grow past what the last
// step left; checkGlobal asks it only after a step whose call did not fail.
func (r *runner) growthProblems(w explained, res residue) []string {
	prevQueued := r.q.queued
	if w.dispatches > 0 || prevQueued < 0 {
		prevQueued = max(res.queued, 0)
	}
	if res.quar > r.q.start || res.dev > int64(r.q.dev) || res.pin > int64(r.q.pinned) || res.events > r.q.events || max(res.queued, 0) > prevQueued {
		return []string{fmt.Sprintf("the quarantine grew in a step that did not fail: leases %d -> %d, device bytes %d -> %d, "+
			"pinned bytes %d -> %d, events %d -> %d, queued ops %d -> %d", r.q.start, res.quar, r.q.dev, res.dev, r.q.pinned, res.pin,
			r.q.events, res.events, r.q.queued, res.queued)}
	}
	return nil
}

// poolProblems checks the registered ranges and the Backend's launch
// resources against the device: the leases out are those queued work holds
// plus the quar quarantined ones, and the streams and events live are
// those the pools account for.
func (w explained) poolProblems(live sim.Live, lrc core.LaunchResourceCounts, quar int) []string {
	var problems []string
	if live.RegisteredRanges != w.regs {
		problems = append(problems, fmt.Sprintf("registered ranges %d, want %d", live.RegisteredRanges, w.regs))
	}
	if lrc.Leases != w.held+quar {
		problems = append(problems, fmt.Sprintf("launch leases %d, want %d + %d quarantined", lrc.Leases, w.held, quar))
	}
	if live.Streams != lrc.Streams.Idle+w.held+quar || uint64(live.Streams) != lrc.Streams.Created-lrc.Streams.Destroyed {
		problems = append(problems, fmt.Sprintf("streams live %d, pool %+v, leases out %d + %d quarantined", live.Streams, lrc.Streams, w.held, quar))
	}
	evNet := lrc.CompletionEvents.Created - lrc.CompletionEvents.Destroyed + lrc.TimingEvents.Created - lrc.TimingEvents.Destroyed
	if uint64(live.Events) != evNet {
		problems = append(problems, fmt.Sprintf("events live %d, pool %+v %+v", live.Events, lrc.CompletionEvents, lrc.TimingEvents))
	}
	return problems
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
