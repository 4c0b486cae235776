package proptest

// Steps for batched device work: Backend.Run and RunAsync (clears, fills,
// uploads, kernel steps and reads on one stream with one fence), the same
// calls and the transfer verbs over an OptimizerDispatcher's Buffers, and a
// custom Program with its own Go twin beside the built-ins.
//
// The model states the documented order of a batch: clears and fills, then
// uploads (later ones win where they overlap), then the steps in order, each
// seeing what the ones before it wrote, then the reads. Validation comes
// before anything is queued, so a refused batch changes nothing; a batch
// failed by a fault may have written any byte it targets.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// xorImage is the custom program's code image. The simulated device runs
// its Go twin; the PTX only has to declare the entry.
var xorImage = []byte(`.version 8.0
.target sm_75
.address_size 64
.visible .entry proptest_xor_u32(.param .u64 p, .param .u32 n, .param .u32 v)
{
	ret;
}
`)

// xorProgram xors every whole u32 of its buffer with a scalar: a program the
// package does not ship, dispatched through its Go twin.
var xorProgram = func() *core.Program {
	p, err := core.NewProgram(core.ProgramSpec{Name: "proptest_xor_u32", Image: xorImage, Entry: "proptest_xor_u32",
		Buffers: 1, Grid: core.GridRule{FromBuffer: 0, ElemSize: 4}, Count: true, Scalars: 1, Host: xorTwin})
	if err != nil {
		panic(err)
	}
	return p
}()

func xorTwin(mem core.KernelMemory, _ core.LaunchConfig, args []core.KernelArg) error {
	if len(args) != 3 || !args[0].IsPtr || args[1].IsPtr || args[2].IsPtr {
		return fmt.Errorf("proptest_xor_u32: parameters %+v", args)
	}
	b, err := mem.Bytes(args[0].Ptr, 4*int(args[1].U32))
	if err != nil {
		return err
	}
	for i := 0; i+4 <= len(b); i += 4 {
		binary.LittleEndian.PutUint32(b[i:], binary.LittleEndian.Uint32(b[i:])^args[2].U32)
	}
	return nil
}

func init() {
	builtinPrograms = append(builtinPrograms, xorProgram)
	// A Pending's errors name its method; the dispatcher's calls are
	// judged under names of their own, and their errors name the call the
	// user made.
	opAliases["AwaitInto"] = []string{"Pending.AwaitInto"}
	for _, c := range optCalls {
		opAliases["opt."+c] = []string{optOps[c]}
	}
}

// stepChoice is one more kind of step for drawStep, with its weight.
type stepChoice struct {
	w    int
	make func() step
}

// extraSteps are the steps of the files beside core_commands_test.go.
func extraSteps(src entropy, k stepKinds) []stepChoice {
	c := []stepChoice{{6, func() step { return drawBatch(src, false) }}}
	if k.optimizer {
		c = append(c, stepChoice{5, func() step { return drawBatch(src, true) }},
			stepChoice{1, func() step { return &staticSplitStep{domain: uint64(src.intn(2)), flip: chance(src, 50)} }})
	}
	if k.async {
		c = append(c, stepChoice{2, func() step { return drawPinAround(src) }})
	}
	if k.faults {
		c = append(c, stepChoice{2, func() step { return drawNoPackRoom(src) }})
	}
	return c
}

// kernelStep is one launch of a batch: fill (a: dst), copy (a: src, b:
// dst) or xor (a: dst).
type kernelStep struct {
	prog  int // 0 fill, 1 copy, 2 xor
	a, b  int
	value uint32
}

// batchStep is Backend.Run or RunAsync (then AwaitInto), or, with opt, Run
// or one of the transfer verbs over the dispatcher's Buffers.
type batchStep struct {
	withFault
	opt     bool
	api     int // Backend: 0 Run, 1 RunAsync; dispatcher: see optCalls
	clears  []int
	fills   []int
	values  []byte
	ups     []int
	upAt    []place
	seeds   []int
	kernels []kernelStep
	reads   []int
	readAt  []place
	dst     dstSpec
}

// optCalls are the calls a dispatcher step makes, by label: Run; the first
// upload as UploadSlice (exactly the buffer's length); every upload from
// offset 0 or at its drawn offset with Upload; the first read whole with
// Download; every read whole into new slices, or the drawn ranges into
// caller slots, with DownloadMany. optOps names each one's Op.
var optCalls = [...]string{"Run", "UploadSlice", "UploadWhole", "UploadAt", "Download", "DownloadWhole", "DownloadRanges"}

var optOps = map[string]string{"Run": "Run", "UploadSlice": "UploadSlice", "UploadWhole": "Upload", "UploadAt": "Upload",
	"Download": "Download", "DownloadWhole": "DownloadMany", "DownloadRanges": "DownloadMany"}

func drawBatch(src entropy, opt bool) *batchStep {
	s := &batchStep{opt: opt, api: src.intn(2)}
	if opt {
		s.api = src.intn(len(optCalls) + 3)
		if s.api >= len(optCalls) {
			s.api = 0 // Run most often
		}
	}
	few := func() int { return src.intn(4) }
	s.clears = drawPicks(src, src.intn(2))
	s.fills = drawPicks(src, few())
	for range s.fills {
		s.values = append(s.values, byte(src.intn(256)))
	}
	s.ups = drawPicks(src, few())
	s.upAt = drawPlaces(src, len(s.ups), false)
	for range s.ups {
		s.seeds = append(s.seeds, src.intn(1<<16))
	}
	for range few() {
		p := drawPicks(src, 2)
		s.kernels = append(s.kernels, kernelStep{prog: src.intn(3), a: p[0], b: p[1], value: uint32(src.intn(1 << 30))})
	}
	s.reads = drawPicks(src, few())
	s.readAt = drawPlaces(src, len(s.reads), true)
	s.dst = drawDst(src, len(s.reads))
	if chance(src, 75) {
		// Most batches are valid, so that most reach the device.
		for _, ps := range [][]int{s.clears, s.fills, s.ups, s.reads} {
			for i := range ps {
				ps[i] = pickLive(ps[i])
			}
		}
		for i := range s.kernels {
			s.kernels[i].a, s.kernels[i].b = pickLive(s.kernels[i].a), pickLive(s.kernels[i].b)
			if s.kernels[i].prog == 1 {
				s.kernels[i].a = s.kernels[i].b // a copy onto itself never lacks source bytes
			}
		}
		for _, ps := range [][]place{s.upAt, s.readAt} {
			for i := range ps {
				if ps[i].mode < placeZero {
					ps[i].mode = placeIn
				}
			}
		}
	}
	return s
}

func (s *batchStep) setFault(f *faultSpec) { s.f = f }
func (s *batchStep) String() string {
	name := [...]string{"Run", "RunAsync"}[s.api%2]
	if s.opt {
		name = "opt." + optCalls[s.api]
	}
	return fmt.Sprintf("batch(%s clears=%v fills=%v/%v ups=%v at=%v seeds=%v kernels=%+v reads=%v at=%v dst=%+v)%s",
		name, s.clears, s.fills, s.values, s.ups, s.upAt, s.seeds, s.kernels, s.reads, s.readAt, s.dst, s.faultString())
}

// content is where a batch step keeps what it knows of buffer bytes: the
// runner's model for Backend handles, optContent for dispatcher ids.
type content interface {
	bytesOf(id uint64) (data []byte, unknown spans)
	write(id uint64, off int, data []byte)
	forget(id uint64, x span)
	check(id uint64, off int, got []byte) error
}

type modelContent struct{ m *model }

func (c modelContent) bytesOf(id uint64) ([]byte, spans) {
	b := c.m.bufs[id]
	u := b.unknown
	for _, x := range c.m.racySpans(id) {
		u = u.add(x)
	}
	return b.data, u
}
func (c modelContent) write(id uint64, off int, data []byte) { c.m.write(id, off, data) }
func (c modelContent) forget(id uint64, x span)              { c.m.forget(id, x) }
func (c modelContent) check(id uint64, off int, got []byte) error {
	return c.m.checkBytes(id, off, got)
}

// optContent is what the model knows of the dispatcher's buffers, by id.
// Ids are never reused; an id first seen has unknown bytes (a pooled
// buffer keeps what its last owner wrote).
type optContent struct {
	o    *optModel
	bufs map[uint64]*mbuf
}

func (c *optContent) get(id uint64) *mbuf {
	b := c.bufs[id]
	if b == nil {
		n := c.o.ids[id]
		b = &mbuf{data: make([]byte, n), unknown: spans{}.add(span{0, n})}
		c.bufs[id] = b
	}
	return b
}
func (c *optContent) bytesOf(id uint64) ([]byte, spans) { b := c.get(id); return b.data, b.unknown }
func (c *optContent) write(id uint64, off int, data []byte) {
	b := c.get(id)
	copy(b.data[off:], data)
	b.unknown = b.unknown.remove(span{off, off + len(data)})
}
func (c *optContent) forget(id uint64, x span) { b := c.get(id); b.unknown = b.unknown.add(x) }
func (c *optContent) check(id uint64, off int, got []byte) error {
	b := c.get(id)
	m := &model{bufs: map[uint64]*mbuf{id: b}}
	return m.checkBytes(id, off, got)
}

// batchItems is a drawn batch resolved against the runner: Backend handles
// (ids and lengths; for the dispatcher, the ids' buffers).
type batchItems struct {
	clears, fills, ups, reads []core.Buffer
	upData                    [][]byte
	upOff                     []int
	fillVals                  []byte
	rs                        []core.Range
	kern                      []core.Step
	kinds                     map[core.Kind]bool // the refusals the model allows
	valid                     func(core.Buffer) bool
	badUp                     []bool // upload i's drawn range does not fit
}

// allowed returns the refusal the model expects given err: its kind when
// the model allows it (several problems may each be reported first), else
// one the model allows, or 0 (success) when none is.
func (it *batchItems) allowed(err error) core.Kind {
	var e *core.Error
	if errors.As(err, &e) && it.kinds[e.Kind] {
		return e.Kind
	}
	for k := range it.kinds {
		return k
	}
	return 0
}

// recheck recomputes the allowed refusals from the items the call uses.
func (it *batchItems) recheck() {
	it.kinds = map[core.Kind]bool{}
	bad := func(h core.Buffer) {
		if !it.valid(h) {
			it.kinds[core.KindUnknownHandle] = true
		}
	}
	for _, h := range it.clears {
		bad(h)
	}
	for _, h := range it.fills {
		bad(h)
	}
	for i, h := range it.ups {
		bad(h)
		if it.badUp[i] || !rangeOK(it.upOff[i], len(it.upData[i]), h.Len) {
			it.kinds[core.KindInvalidArgument] = true
		}
	}
	for _, k := range it.kern {
		for _, h := range k.Bufs {
			bad(h)
		}
		if len(k.Bufs) == 2 && k.Bufs[0].Len < k.Bufs[1].Len/4*4 {
			it.kinds[core.KindInvalidArgument] = true // the source is shorter than the count
		}
	}
	for _, x := range it.rs {
		bad(x.Buf)
		if !rangeOK(x.Offset, x.Len, x.Buf.Len) {
			it.kinds[core.KindInvalidArgument] = true
		}
	}
}

func (r *runner) resolveBatch(s *batchStep, o *optModel) *batchItems {
	it := &batchItems{kinds: map[core.Kind]bool{}}
	valid := r.m.valid
	pick := r.pick
	if o != nil {
		live := make([]uint64, 0, len(o.ids))
		for _, id := range o.order {
			if _, ok := o.ids[id]; ok {
				live = append(live, id)
			}
		}
		pick = func(p int) core.Buffer {
			if p%16 < 12 && len(live) > 0 {
				id := live[p%len(live)]
				return core.Buffer{ID: id, Len: o.ids[id]}
			}
			if len(o.order) > 0 && p%16 < 15 {
				id := o.order[p%len(o.order)]
				return core.Buffer{ID: id, Len: o.ids[id]} // freed: length 0, unknown id
			}
			return core.Buffer{ID: 1<<62 + uint64(p), Len: 1 + p%64}
		}
		valid = func(h core.Buffer) bool { _, ok := o.ids[h.ID]; return ok }
	}
	it.valid = valid
	for _, p := range s.clears {
		h := pick(p)
		it.clears = append(it.clears, h)
	}
	for _, p := range s.fills {
		h := pick(p)
		it.fills = append(it.fills, h)
	}
	it.fillVals = s.values
	for i, p := range s.ups {
		h := pick(p)
		off, n := s.upAt[i].resolve(h.Len)
		it.badUp = append(it.badUp, !rangeOK(off, n, h.Len))
		n = max(n, 0)
		it.ups = append(it.ups, h)
		it.upOff = append(it.upOff, off)
		it.upData = append(it.upData, patternData(s.seeds[i], n))
	}
	progs := []*core.Program{core.ProgramFillU32(), core.ProgramCopyU32(), xorProgram}
	for _, k := range s.kernels {
		a, b := pick(k.a), pick(k.b)
		st := core.Step{Program: progs[k.prog], Bufs: []core.Buffer{a}, Config: core.DispatchConfig{Scalars: []uint32{k.value}}}
		if k.prog == 1 {
			st.Bufs, st.Config.Scalars = []core.Buffer{a, b}, nil
		}
		it.kern = append(it.kern, st)
	}
	for i, p := range s.reads {
		h := pick(p)
		off, n := s.readAt[i].resolve(h.Len)
		it.reads = append(it.reads, h)
		it.rs = append(it.rs, core.Range{Buf: h, Offset: off, Len: n})
	}
	it.recheck()
	return it
}

func (s *batchStep) run(r *runner) error {
	if s.opt {
		o, err := r.optimizer()
		if err != nil {
			return err
		}
		if o.content == nil {
			o.content = &optContent{o: o, bufs: map[uint64]*mbuf{}}
		}
		return s.runOpt(r, o, o.content)
	}
	it := r.resolveBatch(s, nil)
	b := it.batch()
	r.logf("batch %s: %d clears %d fills %d uploads %d steps %d reads", s, len(b.Clears), len(b.Fills), len(b.Uploads), len(b.Steps), len(b.Reads))
	dst := s.dst.slots2()
	before := snap2(dst)
	var (
		got    [][]byte
		err    error
		call   = "Run"
		queued = -1
	)
	if s.api == 0 {
		got, err = r.b.Run(b, dst)
	} else {
		call = "RunAsync"
		var p *core.Pending
		p, err = r.b.RunAsync(b)
		if err == nil {
			if p == nil {
				return fmt.Errorf("RunAsync returned no Pending and no error")
			}
			got, err = p.AwaitInto(dst)
			call, queued = "AwaitInto", 1
			if err != nil {
				if cerr := p.Close(); cerr != nil {
					return fmt.Errorf("Pending.Close after a failed AwaitInto: %v", cerr)
				}
			}
		} else if p != nil {
			return fmt.Errorf("failed RunAsync returned a Pending")
		} else {
			queued = 0
		}
	}
	return r.judgeBatch(call, it, modelContent{r.m}, err, got, dst, before, queued)
}

// judgeBatch judges a batch's outcome and applies its effects to c.
// queued says whether the work was queued before the failure: yes (1), no
// (0) or unknown (-1, a synchronous Run, whose telemetry then tells).
func (r *runner) judgeBatch(call string, it *batchItems, c content, err error, got, dst [][]byte, before snapshot, queued int) error {
	out, verr := r.judge(call, err, it.allowed(err))
	if verr != nil {
		return verr
	}
	if out != succeeded {
		if dst != nil && !snap2(got).equal(before) && got != nil {
			return fmt.Errorf("failed %s changed the caller's output slots", call)
		}
		if out == rejected {
			return r.noCalls(call + " rejected")
		}
		// Queueing counts the work; a failure after it (at the fence)
		// leaves the counts. A failed Run may have failed either way.
		q := it.queued()
		if queued != 0 && !r.cfg.shared && r.observeBatch(call, it, &q) != nil {
			q = it.queued() // not all of it was queued
		}
		switch {
		case queued == 1:
			q.add(&r.m.tel)
		case queued < 0 && !r.cfg.shared:
			with := r.m.tel
			q.add(&with)
			if r.b.Telemetry() == with {
				r.m.tel = with
			}
		}
		for _, h := range it.clears {
			c.forget(h.ID, span{0, h.Len})
			r.failedTargets(h.ID, span{0, h.Len})
		}
		for _, h := range it.fills {
			c.forget(h.ID, span{0, h.Len})
			r.failedTargets(h.ID, span{0, h.Len})
		}
		for i, h := range it.ups {
			x := span{it.upOff[i], it.upOff[i] + len(it.upData[i])}
			c.forget(h.ID, x)
			r.failedTargets(h.ID, x)
		}
		for _, k := range it.kern {
			d := k.Bufs[len(k.Bufs)-1]
			x := span{0, d.Len / 4 * 4}
			c.forget(d.ID, x)
			r.failedTargets(d.ID, x)
		}
		for _, h := range it.reads {
			r.failedTargets(h.ID, span{})
		}
		return nil
	}
	return r.applyBatch(call, it, c, got)
}

// applyBatch applies a successful batch in its documented order, checks the
// reads and the device calls, and moves the telemetry.
func (r *runner) applyBatch(call string, it *batchItems, c content, got [][]byte) error {
	for _, h := range it.clears {
		c.write(h.ID, 0, make([]byte, h.Len))
	}
	for i, h := range it.fills {
		c.write(h.ID, 0, bytes.Repeat([]byte{it.fillValue(i)}, h.Len))
	}
	for i, h := range it.ups {
		c.write(h.ID, it.upOff[i], it.upData[i])
	}
	for _, k := range it.kern {
		applyKernel(c, k)
	}
	if len(got) != len(it.rs) {
		return fmt.Errorf("%s returned %d read slots for %d reads", call, len(got), len(it.rs))
	}
	for i, x := range it.rs {
		if len(got[i]) != x.Len {
			return fmt.Errorf("%s read %d has %d bytes, want %d", call, i, len(got[i]), x.Len)
		}
		if x.Len == 0 {
			continue
		}
		if err := c.check(x.Buf.ID, x.Offset, got[i]); err != nil {
			return fmt.Errorf("%s read %d: %w", call, i, err)
		}
	}
	q := it.queued()
	if q.work == 0 {
		return r.noCalls(call + " of an empty batch")
	}
	if err := r.observeBatch(call, it, &q); err != nil {
		return err
	}
	q.add(&r.m.tel)
	r.m.tel.SyncPoints++
	memsets := len(it.clears) + len(it.fills)
	// Only work handed out as a Pending (collected here by AwaitInto) can be
	// polled, so only it records a completion event; Run waits with the fence.
	var records uint64
	if call == "AwaitInto" {
		records = 1
	}
	return r.expectTransfer(call, map[sim.Op]uint64{sim.OpMemsetD8Async: uint64(memsets), sim.OpLaunch: uint64(len(it.kern)) + q.packed,
		sim.OpLaunchProgrammatic: programmaticLaunches(it.kern), sim.OpMemcpyHtoDAsync: q.h2d, sim.OpMemcpyDtoHAsync: q.d2h,
		sim.OpStreamSynchronize: 1, sim.OpEventRecord: records})
}

func (it *batchItems) fillValue(i int) byte { return it.fillVals[i] }

// batchTel is what queueing a batch adds to the telemetry (documented: the
// work queued, fused copies and requested ones, one upload and one readback
// operation when it moves bytes); the fence that waits for it adds one
// synchronization.
type batchTel struct {
	work, upCopies, rdCopies int
	tel                      core.Telemetry
	h2d, d2h, packed         uint64 // DMAs each way and packed launches (observeBatch)
}

func (it *batchItems) queued() batchTel {
	ups, reads := map[uint64][]span{}, map[uint64][]span{}
	nUps, nReads := 0, 0
	for i, h := range it.ups {
		if len(it.upData[i]) > 0 {
			nUps++
			ups[h.ID] = append(ups[h.ID], span{it.upOff[i], it.upOff[i] + len(it.upData[i])})
		}
	}
	for _, x := range it.rs {
		if x.Len > 0 {
			nReads++
			reads[x.Buf.ID] = append(reads[x.Buf.ID], span{x.Offset, x.Offset + x.Len})
		}
	}
	upBytes, upCopies := unionStats(ups)
	rdBytes, rdCopies := unionStats(reads)
	memsets := len(it.clears) + len(it.fills)
	q := batchTel{work: memsets + upCopies + len(it.kern) + rdCopies, upCopies: upCopies, rdCopies: rdCopies,
		h2d: uint64(upCopies), d2h: uint64(rdCopies)}
	q.tel = core.Telemetry{MemsetOps: uint64(memsets), KernelLaunches: uint64(len(it.kern)),
		HostToDeviceBytes: upBytes, DeviceToHostBytes: rdBytes,
		RequestedCopies: uint64(nUps + nReads), DeviceCopies: uint64(upCopies + rdCopies)}
	if upBytes > 0 {
		q.tel.UploadOps = 1
	}
	if rdBytes > 0 {
		q.tel.ReadbackOps = 1
	}
	return q
}

func (q batchTel) add(t *core.Telemetry) {
	t.MemsetOps += q.tel.MemsetOps
	t.KernelLaunches += q.tel.KernelLaunches
	t.HostToDeviceBytes += q.tel.HostToDeviceBytes
	t.DeviceToHostBytes += q.tel.DeviceToHostBytes
	t.UploadOps += q.tel.UploadOps
	t.ReadbackOps += q.tel.ReadbackOps
	t.RequestedCopies += q.tel.RequestedCopies
	t.DeviceCopies += q.h2d + q.d2h
	t.PackedLaunches += q.packed
}

// applyKernel applies one step's documented effect: each kernel touches the
// whole u32 elements of the buffer its count comes from (the last bound).
func applyKernel(c content, k core.Step) {
	d := k.Bufs[len(k.Bufs)-1]
	n := d.Len / 4 * 4
	if n == 0 {
		return
	}
	data, unknown := c.bytesOf(d.ID)
	out := make([]byte, n)
	switch k.Program {
	case core.ProgramFillU32():
		for i := 0; i < n; i += 4 {
			binary.LittleEndian.PutUint32(out[i:], k.Config.Scalars[0])
		}
		c.write(d.ID, 0, out)
	case core.ProgramCopyU32():
		sdata, sunknown := c.bytesOf(k.Bufs[0].ID)
		copy(out, sdata[:n])
		c.write(d.ID, 0, out)
		for _, x := range sunknown {
			if o := (span{x.off, min(x.end, n)}); o.off < o.end {
				c.forget(d.ID, o)
			}
		}
	default:
		copy(out, data[:n])
		for i := 0; i < n; i += 4 {
			binary.LittleEndian.PutUint32(out[i:], binary.LittleEndian.Uint32(out[i:])^k.Config.Scalars[0])
		}
		unknown = slices.Clone(unknown)
		c.write(d.ID, 0, out)
		for _, x := range unknown {
			if o := (span{x.off, min(x.end, n)}); o.off < o.end {
				c.forget(d.ID, o)
			}
		}
	}
}

// batch is the drawn batch.
func (it *batchItems) batch() core.Batch {
	b := core.Batch{Clears: it.clears, Steps: it.kern, Reads: it.rs}
	for i, h := range it.fills {
		b.Fills = append(b.Fills, core.Fill{Buf: h, Value: it.fillVals[i]})
	}
	for i, h := range it.ups {
		b.Uploads = append(b.Uploads, core.UploadAt{Buf: h, Offset: it.upOff[i], Data: it.upData[i]})
	}
	return b
}

// runOpt runs Run with everything drawn, or one transfer verb with the
// uploads or the reads of the draw, over the dispatcher's Buffers.
func (s *batchStep) runOpt(r *runner, o *optModel, c *optContent) error {
	it := r.resolveBatch(s, o)
	call := "opt." + optCalls[s.api]
	switch optCalls[s.api] {
	case "Run":
		dst := s.dst.slots2()
		before := snap2(dst)
		b := it.batch()
		r.logf("%s %+v", call, b)
		got, err := r.b.Run(b, dst)
		return r.judgeBatch(call, it, c, err, got, dst, before, -1)
	case "UploadSlice", "UploadWhole", "UploadAt":
		return s.optUploads(r, it, c)
	default:
		return s.optReads(r, it, c)
	}
}

// optUploads runs UploadSlice (the first upload, of exactly the buffer's
// length), Upload of every upload from offset 0 (whole buffers), or Upload
// of the drawn uploads.
func (s *batchStep) optUploads(r *runner, it *batchItems, c content) error {
	label := optCalls[s.api]
	call := "opt." + label
	it.clears, it.fills, it.kern, it.reads, it.rs = nil, nil, nil, nil, nil
	if len(it.ups) == 0 {
		return nil
	}
	if label != "UploadAt" {
		for i, h := range it.ups {
			it.upOff[i] = 0
			if s.upAt[i].mode >= placeZero && h.Len > 0 {
				it.upData[i] = patternData(s.seeds[i], h.Len)
			}
			it.badUp[i] = !rangeOK(0, len(it.upData[i]), h.Len)
			if label == "UploadSlice" {
				it.badUp[i] = len(it.upData[i]) != h.Len // exactly the buffer's length
			}
		}
	}
	if label == "UploadSlice" {
		it.ups, it.upData, it.upOff, it.badUp = it.ups[:1], it.upData[:1], it.upOff[:1], it.badUp[:1]
	}
	it.recheck()
	r.logf("%s %d uploads", call, len(it.ups))
	var err error
	if label == "UploadSlice" {
		err = core.UploadSlice(r.b, it.ups[0], it.upData[0])
	} else {
		ups := make([]core.UploadAt, len(it.ups))
		for i, h := range it.ups {
			ups[i] = core.UploadAt{Buf: h, Offset: it.upOff[i], Data: it.upData[i]}
		}
		err = r.b.Upload(ups...)
	}
	return r.judgeTransfer(call, it, c, err, nil, true)
}

// optReads runs Download (the first read, whole), DownloadMany of every
// read's whole buffer into new slices, or DownloadMany of the drawn ranges
// into caller slots.
func (s *batchStep) optReads(r *runner, it *batchItems, c content) error {
	label := optCalls[s.api]
	call := "opt." + label
	it.clears, it.fills, it.kern, it.ups, it.upData, it.upOff, it.badUp = nil, nil, nil, nil, nil, nil, nil
	if len(it.rs) == 0 {
		return nil
	}
	if label != "DownloadRanges" {
		for i, x := range it.rs {
			it.rs[i] = x.Buf.All()
		}
	}
	if label == "Download" {
		it.rs, it.reads = it.rs[:1], it.reads[:1]
	}
	it.recheck()
	r.logf("%s %d reads", call, len(it.rs))
	var (
		got [][]byte
		err error
	)
	switch label {
	case "Download":
		var one []byte
		one, err = r.b.Download(it.rs[0], nil)
		got = [][]byte{one}
		if err != nil && one != nil {
			return fmt.Errorf("failed %s returned bytes", call)
		}
	case "DownloadWhole":
		got, err = r.b.DownloadMany(it.rs, nil)
		if err != nil && got != nil {
			return fmt.Errorf("failed %s returned slots", call)
		}
	default:
		dst := s.dst.slots2()
		before := snap2(dst)
		got, err = r.b.DownloadMany(it.rs, dst)
		if err != nil && !snap2(got).equal(before) {
			return fmt.Errorf("failed %s changed the caller's output slots", call)
		}
	}
	return r.judgeTransfer(call, it, c, err, got, false)
}

// judgeTransfer judges a transfer verb over the dispatcher's Buffers: on
// success the bytes, the device calls and telemetry of the transfer.
func (r *runner) judgeTransfer(call string, it *batchItems, c content, err error, got [][]byte, upload bool) error {
	want := it.allowed(err)
	if upload {
		r.allowOOM = len(it.ups) >= packMinCopies
	} else {
		r.allowOOM = len(it.rs) >= packMinCopies
	}
	r.packable = r.allowOOM
	out, verr := r.judge(call, err, want)
	if verr != nil {
		return verr
	}
	if out == rejected {
		return r.noCalls(call + " rejected")
	}
	if out == faulted {
		for i, h := range it.ups {
			x := span{it.upOff[i], it.upOff[i] + len(it.upData[i])}
			c.forget(h.ID, x)
			r.failedTargets(h.ID, x)
		}
		for _, x := range it.rs {
			r.failedTargets(x.Buf.ID, span{})
		}
		return nil
	}
	byHandle := map[uint64][]span{}
	nonEmpty := 0
	t := &r.m.tel
	if upload {
		for i, h := range it.ups {
			if len(it.upData[i]) == 0 {
				continue
			}
			nonEmpty++
			c.write(h.ID, it.upOff[i], it.upData[i])
			byHandle[h.ID] = append(byHandle[h.ID], span{it.upOff[i], it.upOff[i] + len(it.upData[i])})
		}
	} else {
		if len(got) != len(it.rs) {
			return fmt.Errorf("%s returned %d results for %d reads", call, len(got), len(it.rs))
		}
		for i, x := range it.rs {
			if len(got[i]) != x.Len {
				return fmt.Errorf("%s result %d has %d bytes, want %d", call, i, len(got[i]), x.Len)
			}
			if x.Len == 0 {
				continue
			}
			nonEmpty++
			byHandle[x.Buf.ID] = append(byHandle[x.Buf.ID], span{x.Offset, x.Offset + x.Len})
			if err := c.check(x.Buf.ID, x.Offset, got[i]); err != nil {
				return fmt.Errorf("%s result %d: %w", call, i, err)
			}
		}
	}
	if nonEmpty == 0 {
		return r.noCalls(call + " of nothing")
	}
	moved, copies := unionStats(byHandle)
	op := sim.OpMemcpyDtoHAsync
	if upload {
		t.HostToDeviceBytes += moved
		t.UploadOps++
		op = sim.OpMemcpyHtoDAsync
	} else {
		t.DeviceToHostBytes += moved
		t.ReadbackOps++
	}
	t.SyncPoints++
	t.RequestedCopies += uint64(nonEmpty)
	return r.expectPath(call, copies, op)
}

// drawNoPackRoom draws a wide transfer (a packed-path candidate) whose first
// device allocation, its packed staging, runs out of memory: the documented
// fallback moves the copies by the per-copy path, so the call must succeed.
func drawNoPackRoom(src entropy) step {
	oom := &faultSpec{op: sim.OpMemAlloc, nth: 1, code: cudaapi.CUDA_ERROR_OUT_OF_MEMORY}
	picks, ats := drawWide(src)
	if chance(src, 50) {
		seeds := make([]int, len(picks))
		for i := range seeds {
			seeds[i] = src.intn(1 << 16)
		}
		return &uploadAtManyStep{withFault: withFault{oom}, picks: picks, ats: ats, seeds: seeds}
	}
	return &readStep{withFault: withFault{oom}, api: readRangesInto, picks: picks, ats: ats, dst: drawDst(src, len(picks))}
}

// drainThroughDispatcher is drainProbe's fallback when the runner holds no
// live buffer but the dispatcher does: a read of one of its ids acquires a
// lease, which drains the quarantine (faults are disarmed), before the
// dispatcher's Close, which refuses buffers the quarantine still holds.
func (r *runner) drainThroughDispatcher() error {
	if r.opt == nil {
		return nil
	}
	for _, id := range r.opt.order {
		n, ok := r.opt.ids[id]
		if !ok {
			continue
		}
		got, err := r.b.Download(core.Buffer{ID: id, Len: n}.All(), nil)
		if err != nil || len(got) != n {
			return fmt.Errorf("Download of a dispatcher buffer after faults were disarmed, with a quarantine: %d bytes, %v", len(got), err)
		}
		if q := r.b.LaunchResourceCounts().Quarantined; q != 0 {
			return fmt.Errorf("a lease acquisition with faults disarmed left %d quarantined lease(s)", q)
		}
		t := &r.m.tel
		t.DeviceToHostBytes += uint64(n)
		t.ReadbackOps++
		t.SyncPoints++
		t.RequestedCopies++
		t.DeviceCopies++
		return nil
	}
	return nil
}
