package proptest

// Steps for batched device work: Backend.Run and RunAsync (clears, fills,
// uploads, kernel steps and reads on one stream with one fence), the same
// calls and the transfer verbs over an OptimizerDispatcher's Buffers, and a
// custom Program with its own Go twin beside the built-ins. This file draws
// the steps and resolves them against the runner; core_batch_run_test.go
// runs and judges Backend batches, core_batch_opt_test.go the dispatcher's.
//
// The model states the documented order of a batch: clears and fills, then
// uploads (later ones win where they overlap), then the steps in order, each
// seeing what the ones before it wrote, then the reads. Validation comes
// before anything is queued, so a refused batch changes nothing; a batch
// failed by a fault may have written any byte it targets.

import (
	"encoding/binary"
	"errors"
	"fmt"

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

// xorTwin is xorProgram on the simulated device: it xors the first n u32
// of the bound buffer with the scalar.
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

// init registers xorProgram with the built-ins and the Op names the batch
// and dispatcher calls may report.
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

// drawBatch draws a batch step; three times in four its picks name live
// handles and its places lie inside their buffers.
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

// setFault arms f for the step.
func (s *batchStep) setFault(f *faultSpec) { s.f = f }

// String names the call and lists the draw, for the step trace.
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

// modelContent is content over the runner's model of Backend buffers.
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

// get returns the model of dispatcher buffer id, all bytes unknown when
// the id is first seen.
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

// resolveBatch resolves a drawn batch against the runner's handles or, with
// o, against the dispatcher's ids, and works out which refusals it allows.
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
