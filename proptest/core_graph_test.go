package proptest

// Graph steps of the core.Backend state machine: Capture of a small batch
// (an optional fill of C, an upload into B, an optional copy of B into C,
// a read of C), Replay and ReplayAsync with fresh upload bytes each time,
// collection of an asynchronous replay, and Graph.Close. The model holds
// every buffer a graph names in flight until its Close, predicts each
// replay's bytes and telemetry from the batch alone, and counts the pinned
// staging an open graph owns.

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/vyre-go/vyrecuda/accounting"
	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// mgraph is the model of one open Graph.
type mgraph struct {
	g        *core.Graph
	b, c     core.Buffer // upload (and copy source) buffer; fill, copy and read buffer
	fill     bool
	value    byte
	off      int
	data     []byte // the slice given to Capture; the model rewrites its bytes before each replay
	copyN    int    // bytes the step copies from B to C; -1: no step
	timing   bool
	roff, rn int // the read
	ids      []uint64
	// lands: the graph left its read out (Capture queued no DMA down for
	// it): each Replay lands it in chunks after the launch, each
	// ReplayAsync moves it whole after the launch.
	lands bool

	// An uncollected ReplayAsync: its Pending, the upload bytes it packed,
	// and whether a write it is not ordered against touched its bytes.
	pending *core.Pending
	sent    []byte
	dirty   bool
}

// ops counts the device operations one replay runs (event records aside).
func (g *mgraph) ops() int {
	n := 0
	for _, b := range []bool{g.fill, len(g.data) > 0, g.copyN >= 0, g.rn > 0} {
		if b {
			n++
		}
	}
	return n
}

// writes returns the bytes of buffer id one replay writes.
func (g *mgraph) writes(id uint64) spans {
	var s spans
	if id == g.b.ID && len(g.data) > 0 {
		s = s.add(span{g.off, g.off + len(g.data)})
	}
	if id == g.c.ID {
		if g.fill {
			s = s.add(span{0, g.c.Len})
		} else if g.copyN > 0 {
			s = s.add(span{0, g.copyN})
		}
	}
	return s
}

// graphRacySpans adds to s the bytes uncollected replays will write.
func (m *model) graphRacySpans(id uint64, s spans) spans {
	for _, g := range m.graphs {
		if g.pending != nil {
			for _, x := range g.writes(id) {
				s = s.add(x)
			}
		}
	}
	return s
}

// touchGraphs marks uncollected replays that read or write x of buffer id:
// a write there is not ordered against them.
func (m *model) touchGraphs(id uint64, x span) {
	for _, g := range m.graphs {
		if g.pending == nil || x.end <= x.off {
			continue
		}
		touched := g.writes(id).overlaps(x) || id == g.b.ID && g.copyN > 0 && x.off < g.copyN
		if touched {
			g.dirty = true
		}
	}
}

// graphResidue is what open graphs hold on the device beyond buffers: the
// pinned staging of each, and for each uncollected replay a lease (one
// stream, a completion event and two timing events when timed) and its
// queued operations.
type graphResidue struct {
	pinned                 uint64
	leases, events, queued int
}

func (m *model) graphResidue() graphResidue {
	var r graphResidue
	for _, g := range m.graphs {
		if g.ops() > 0 {
			for _, n := range []int{len(g.data), g.rn} {
				if n > 0 {
					size, _ := accounting.BucketSize(n)
					r.pinned += uint64(size)
				}
			}
		}
		if g.pending != nil {
			r.leases++
			r.events++
			r.queued += g.ops() + 1
			if g.timing {
				r.events += 2
				r.queued += 2
			}
		}
	}
	return r
}

// applyReplay records the effects of one replay that ran with upload bytes
// sent and checks its read, got (nil: not delivered).
func (r *runner) applyReplay(g *mgraph, sent []byte, got []byte) error {
	m := r.m
	if g.fill {
		m.write(g.c.ID, 0, bytes.Repeat([]byte{g.value}, g.c.Len))
	}
	if len(sent) > 0 {
		m.write(g.b.ID, g.off, sent)
	}
	if g.copyN >= 0 {
		m.settle(&dispatch{src: g.b.ID, dst: g.c.ID, n: g.copyN}, true, nil)
	}
	if got != nil {
		if err := m.checkBytes(g.c.ID, g.roff, got); err != nil {
			return fmt.Errorf("replay read: %w", err)
		}
	}
	return nil
}

// countReplay adds one launched replay (async: ReplayAsync) to the
// telemetry, as its launch does: everything but the fence, and but the
// chunks of a read a Replay lands.
func (r *runner) countReplay(g *mgraph, sent []byte, async bool) {
	t := &r.m.tel
	if g.fill {
		t.MemsetOps++
	}
	if g.copyN >= 0 {
		t.KernelLaunches++
	}
	if len(sent) > 0 {
		t.HostToDeviceBytes += uint64(len(sent))
		t.UploadOps++
		t.RequestedCopies++
		t.DeviceCopies++
	}
	if g.rn > 0 {
		t.DeviceToHostBytes += uint64(g.rn)
		t.ReadbackOps++
		t.RequestedCopies++
		switch {
		case g.lands:
			if async {
				t.DeviceCopies++ // the whole read's DMA after the launch
			} // a Replay counts its chunks as they land
		case g.copyN >= 0 && r.copyKernelWrites(g.c.ID, g.roff, g.rn):
			t.PackedLaunches++ // the read behind the copy step is a copy kernel node
		default:
			t.DeviceCopies++
		}
	}
}

// forgetReplay records a replay that failed after it may have run in part.
func (r *runner) forgetReplay(g *mgraph) {
	for _, id := range []uint64{g.b.ID, g.c.ID} {
		for _, x := range g.writes(id) {
			r.m.forget(id, x)
			r.failedTargets(id, x)
		}
		r.failedTargets(id, span{})
	}
}

func graphChoices(src entropy) []struct {
	w    int
	make func() step
} {
	return []struct {
		w    int
		make func() step
	}{
		{4, func() step { return drawCapture(src) }},
		{8, func() step {
			return &replayStep{pick: src.intn(1 << 20), async: chance(src, 35), seed: src.intn(1 << 16)}
		}},
		{3, func() step { return &graphAwaitStep{pick: src.intn(1 << 20), how: src.intn(3)} }},
		{2, func() step { return &graphCloseStep{pick: src.intn(1 << 20)} }},
	}
}

// pickGraph returns an open graph of the model, or nil.
func (r *runner) pickGraph(p int) *mgraph {
	if len(r.m.graphs) == 0 {
		return nil
	}
	return r.m.graphs[p%len(r.m.graphs)]
}

// captureStep is Backend.Capture of the small batch mgraph describes.
type captureStep struct {
	withFault
	b, c     int // picks
	fill     bool
	value    byte
	up, read place
	copy     bool
	timing   bool
	seed     int
	order    bool // copy from the longer of the two buffers, so the step mostly validates
}

func drawCapture(src entropy) *captureStep {
	picks := drawPicks(src, 2)
	for i := range picks {
		if chance(src, 80) {
			picks[i] = pickLive(picks[i])
		}
	}
	return &captureStep{b: picks[0], c: picks[1], fill: chance(src, 40), value: byte(src.intn(256)),
		up: drawPlace(src, false), read: drawPlace(src, true), copy: chance(src, 60), timing: chance(src, 30),
		seed: src.intn(1 << 16), order: chance(src, 85)}
}

func (s *captureStep) setFault(f *faultSpec) { s.f = f }
func (s *captureStep) String() string {
	return fmt.Sprintf("capture(b=%d c=%d fill=%v/%#x up=%v read=%v copy=%v timing=%v)%s",
		s.b, s.c, s.fill, s.value, s.up, s.read, s.copy, s.timing, s.faultString())
}

func (s *captureStep) run(r *runner) error {
	const call = "Capture"
	g := &mgraph{b: r.pick(s.b), c: r.pick(s.c), fill: s.fill, value: s.value, timing: s.timing && s.copy, copyN: -1}
	if s.copy && s.order && g.b.Len < g.c.Len {
		g.b, g.c = g.c, g.b
	}
	var n int
	g.off, n = s.up.resolve(g.b.Len)
	g.data = patternData(s.seed, max(n, 0))
	g.roff, g.rn = s.read.resolve(g.c.Len)
	batch := core.Batch{Uploads: []core.UploadAt{{Buf: g.b, Offset: g.off, Data: g.data}},
		Reads: []core.Range{{Buf: g.c, Offset: g.roff, Len: g.rn}}}
	if g.fill {
		batch.Fills = []core.Fill{{Buf: g.c, Value: g.value}}
	}
	var want core.Kind
	if s.copy {
		g.copyN = max(g.c.Len, 0) / 4 * 4
		batch.Steps = []core.Step{{Program: builtinPrograms[1], Bufs: []core.Buffer{g.b, g.c},
			Config: core.DispatchConfig{Timing: g.timing}}}
		if g.b.Len < g.copyN {
			want = core.KindInvalidArgument // program shapes are checked before the handles
		}
	}
	named := []core.Buffer{g.b, g.c}
	if want == 0 {
		for _, h := range named {
			if !r.m.valid(h) {
				want = core.KindUnknownHandle
			}
		}
	}
	if want == 0 && (!rangeOK(g.off, len(g.data), g.b.Len) || !rangeOK(g.roff, g.rn, g.c.Len)) {
		want = core.KindInvalidArgument
	}
	r.logf("%s(%+v)", call, batch)
	gr, err := r.b.Capture(batch)
	out, verr := r.judge(call, err, want)
	if verr != nil {
		return verr
	}
	if out != succeeded {
		if gr != nil {
			return fmt.Errorf("failed %s returned a Graph", call)
		}
		if out == rejected {
			return r.noCalls(call + " rejected")
		}
		return nil
	}
	g.g = gr
	for _, h := range named {
		g.ids = append(g.ids, h.ID)
		r.m.bufs[h.ID].graphN++
	}
	r.m.graphs = append(r.m.graphs, g)
	// Capture records and runs nothing; it uploads a graph with work to
	// the device once and waits for that upload alone (and for a
	// quarantined stream, which its lease acquisition retries).
	d := r.callsDelta()
	up := uint64(0)
	if g.ops() > 0 {
		up = 1
	}
	if d[sim.OpEventSynchronize]+d[sim.OpGraphLaunch] != 0 || d[sim.OpGraphUpload] != up || r.q.start == 0 && d[sim.OpStreamSynchronize] != up {
		return fmt.Errorf("Capture waited or launched: %v", d)
	}
	// A graph may leave its one read out only when it is large enough to
	// be staged (batchMinStaged): nothing then reads it back in the graph.
	g.lands = g.rn > 0 && g.ops() > 0 && d[sim.OpMemcpyDtoHAsync] == 0 && d[sim.OpLaunch] == uint64(b2i(g.copyN >= 0))
	if g.lands && g.rn < batchMinStaged {
		return fmt.Errorf("Capture left a read of %d bytes out of the graph: %v", g.rn, d)
	}
	if err := r.audit(g.b.ID); err != nil {
		return err
	}
	return r.audit(g.c.ID)
}

// replayStep rewrites a graph's upload bytes and replays it, synchronously
// or with ReplayAsync.
type replayStep struct {
	withFault
	pick  int
	async bool
	seed  int
}

func (s *replayStep) setFault(f *faultSpec) { s.f = f }
func (s *replayStep) String() string {
	return fmt.Sprintf("replay(%d async=%v)%s", s.pick, s.async, s.faultString())
}

func (s *replayStep) run(r *runner) error {
	g := r.pickGraph(s.pick)
	if g == nil {
		return nil
	}
	call := map[bool]string{false: "Graph.Replay", true: "Graph.ReplayAsync"}[s.async]
	var want core.Kind
	if g.pending != nil {
		want = core.KindInFlight
	}
	before := bytes.Clone(g.data)
	fillPattern(g.data, s.seed)
	sent := bytes.Clone(g.data)
	r.logf("%s (pending=%v)", call, g.pending != nil)
	var p *core.Pending
	var got [][]byte
	var err error
	dst := [][]byte{[]byte("keep")}
	if s.async {
		p, err = g.g.ReplayAsync()
	} else {
		got, err = g.g.Replay(dst)
	}
	out, verr := r.judge(call, err, want)
	if verr != nil {
		return verr
	}
	switch out {
	case rejected:
		copy(g.data, before) // nothing was packed; the model's bytes are its own
		return r.noCalls(call + " rejected")
	case faulted:
		if !s.async && (len(got) != 1 || string(got[0]) != "keep") {
			return fmt.Errorf("failed %s changed dst: %q", call, got)
		}
		launched := !strings.Contains(err.Error(), "GraphLaunch") && r.callsDelta()[sim.OpGraphLaunch] > 0
		if !s.async && (g.lands && launched || !g.lands && strings.Contains(err.Error(), "StreamSynchronize")) {
			r.countReplay(g, sent, false) // launched, then the fence or the landing failed
		}
		r.forgetReplay(g)
		return r.closeIfQuarantined(g)
	}
	if g.ops() == 0 {
		// Nothing reaches the device: no fence, nothing held.
		return r.noCalls(call + " of a graph without device work")
	}
	r.countReplay(g, sent, s.async)
	if s.async {
		g.pending, g.sent, g.dirty = p, sent, false
		return nil
	}
	if err := r.replayLanded(call, g); err != nil {
		return err
	}
	if len(got) != 1 || len(got[0]) != max(g.rn, 0) {
		return fmt.Errorf("%s returned %d slots (first %d bytes), want 1 of %d", call, len(got), len(got[0]), g.rn)
	}
	return r.applyReplay(g, sent, got[0])
}

// replayLanded checks how a Replay waited and counts it: for a graph that
// lands its read, a DMA down and an event after each chunk and no stream
// synchronization, each chunk a device copy and a sync point; otherwise
// one fence.
func (r *runner) replayLanded(call string, g *mgraph) error {
	if !g.lands {
		r.m.tel.SyncPoints++
		return nil
	}
	d := r.callsDelta()
	n := d[sim.OpMemcpyDtoHAsync]
	if n == 0 || d[sim.OpEventRecord] != n || d[sim.OpStreamSynchronize] != 0 {
		return fmt.Errorf("%s of a graph that lands its read of %d bytes: device calls %v", call, g.rn, d)
	}
	r.m.tel.DeviceCopies += n
	r.m.tel.SyncPoints += n
	countOutcome(call+" (read landed in chunks)", succeeded)
	return nil
}

// closeIfQuarantined closes a graph after a failed replay when the Backend
// holds a quarantine: the replay's stream may be among it, with the graph's
// staging, and then the graph refuses to replay again.
func (r *runner) closeIfQuarantined(g *mgraph) error {
	if r.b.LaunchResourceCounts().Quarantined == 0 {
		return nil
	}
	return r.closeGraph(g, "Graph.Close after a failed replay")
}

// closeGraph closes g (collected) and drops it from the model.
func (r *runner) closeGraph(g *mgraph, what string) error {
	if err := g.g.Close(); err != nil {
		return fmt.Errorf("%s: %v", what, err)
	}
	for _, id := range g.ids {
		r.m.bufs[id].graphN--
	}
	for i, x := range r.m.graphs {
		if x == g {
			r.m.graphs = append(r.m.graphs[:i], r.m.graphs[i+1:]...)
			break
		}
	}
	if _, err := g.g.Replay(nil); !errors.Is(err, core.ErrClosed) {
		return fmt.Errorf("Replay after Close: %v, want ErrClosed", err)
	}
	return nil
}

// graphAwaitStep collects a graph's uncollected replay with AwaitInto (how
// 0), IsReady then AwaitInto (1) or Close (2).
type graphAwaitStep struct {
	withFault
	pick, how int
}

func (s *graphAwaitStep) setFault(f *faultSpec) { s.f = f }
func (s *graphAwaitStep) String() string {
	return fmt.Sprintf("graphAwait(%d how=%d)%s", s.pick, s.how, s.faultString())
}

func (s *graphAwaitStep) run(r *runner) error {
	var g *mgraph
	for i := range r.m.graphs {
		if x := r.m.graphs[(s.pick+i)%len(r.m.graphs)]; x.pending != nil {
			g = x
			break
		}
	}
	if g == nil {
		return nil
	}
	r.logf("Pending.%s of a replay", []string{"AwaitInto", "IsReady+AwaitInto", "Close"}[s.how])
	var got [][]byte
	var err error
	call := "Pending.AwaitInto" // a Pending's errors name the Pending method called
	switch s.how {
	case 0:
		got, err = g.pending.AwaitInto(nil)
	case 1:
		var ready bool
		if ready, err = g.pending.IsReady(); err == nil && !ready {
			return fmt.Errorf("IsReady reported not ready; the simulated device completes work when queried")
		}
		if err == nil {
			got, err = g.pending.AwaitInto(nil)
		} else {
			call = "Pending.IsReady"
		}
	default:
		call = "Pending.Close"
		err = g.pending.Close()
	}
	out, verr := r.judge(call, err, 0)
	if verr != nil {
		return verr
	}
	p, sent, dirty := g.pending, g.sent, g.dirty
	g.pending, g.sent, g.dirty = nil, nil, false
	if out == faulted {
		// A failed wait collects too: Close has nothing left to do.
		if err := p.Close(); err != nil {
			return fmt.Errorf("Pending.Close after a failed await: %v", err)
		}
		r.forgetReplay(g)
		return r.closeIfQuarantined(g)
	}
	if s.how != 1 {
		r.m.tel.SyncPoints++
	}
	var read []byte
	if s.how != 2 && !dirty {
		if len(got) != 1 {
			return fmt.Errorf("AwaitInto of a replay returned %d slots, want 1", len(got))
		}
		read = got[0]
	}
	if dirty {
		// A write it was not ordered against touched its bytes.
		for _, id := range []uint64{g.b.ID, g.c.ID} {
			for _, x := range g.writes(id) {
				r.m.forget(id, x)
			}
		}
		return nil
	}
	return r.applyReplay(g, sent, read)
}

// graphCloseStep closes a graph; with a replay uncollected it must refuse.
type graphCloseStep struct{ pick int }

func (s *graphCloseStep) String() string { return fmt.Sprintf("graphClose(%d)", s.pick) }

func (s *graphCloseStep) run(r *runner) error {
	g := r.pickGraph(s.pick)
	if g == nil {
		return nil
	}
	r.logf("Graph.Close (pending=%v)", g.pending != nil)
	if g.pending != nil {
		err := g.g.Close()
		if _, verr := r.judge("Graph.Close", err, core.KindInFlight); verr != nil {
			return verr
		}
		return r.noCalls("Graph.Close refused")
	}
	if err := r.closeGraph(g, "Graph.Close"); err != nil {
		return err
	}
	if err := g.g.Close(); !errors.Is(err, core.ErrClosed) {
		return fmt.Errorf("second Graph.Close: %v, want ErrClosed", err)
	}
	return nil
}

// closeGraphs collects every uncollected replay and closes every graph, as
// a caller must before closing the Backend.
func (r *runner) closeGraphs() error {
	for len(r.m.graphs) > 0 {
		g := r.m.graphs[0]
		if g.pending != nil {
			if err := g.pending.Close(); err != nil {
				return fmt.Errorf("Pending.Close of a replay before Close: %v", err)
			}
			r.m.tel.SyncPoints++
			if g.dirty {
				r.forgetReplay(g)
			} else if err := r.applyReplay(g, g.sent, nil); err != nil {
				return err
			}
			g.pending, g.sent = nil, nil
		}
		if err := r.closeGraph(g, "Graph.Close before Close"); err != nil {
			return err
		}
	}
	return nil
}
