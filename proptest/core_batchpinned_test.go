package proptest

// Batches that move memory pinned through the Backend by DMA directly
// (core.Batch doc), against a host model. Each case draws a few device
// buffers, fills, uploads (from Go slices, from memory of AllocHostPinned
// and from memory pinned with PinHostBuffer; overlapping and apart), xor
// steps and reads (into nothing, Go slices or pinned memory, given by
// Batch.Into or by the capacity of Run's dst slots), and runs the batch one
// way: Run, RunAsync then Await then AwaitInto, or Capture then replays
// with the upload bytes changed between them, each replay checked against
// Run of the same batch. The contract:
//
//   - the device and every read hold what the model says: memsets, then
//     the uploads in order (later ones win), then the steps, then the reads;
//   - an upload from pinned memory whose range meets no other upload's is
//     one DMA from its Data, read when the work runs (on the lazy simulated
//     device, bytes written into that Data after RunAsync returned reach
//     the device; every other upload was copied at submission);
//   - a non-empty read whose destination is known at submission (Into, or
//     for Run a dst slot with the capacity) and lies in pinned memory lands
//     there by DMA: after Await, before AwaitInto, its bytes are already
//     there, while a Go destination still holds what it held; a read given
//     Into has Into itself as its result slot, a read without one the
//     storage of its dst slot when that slot has the capacity;
//     WithAtomicReadbacks turns the direct reads off;
//   - Telemetry counts what moved: the union of the uploads' bytes, the
//     union of the staged reads' bytes plus every direct read's;
//   - the pinned memory a direct copy uses cannot be freed or unpinned
//     until the work is collected (a Graph: closed), and always can be
//     after; Close then leaves nothing on the device.

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"testing"

	"github.com/leanovate/gopter"
	"github.com/leanovate/gopter/prop"
	"github.com/stretchr/testify/assert"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/xferplan"
)

// Where host memory of a case lies.
type pinMem int

const (
	memNone  pinMem = iota // no destination (reads only)
	memGo                  // a Go slice
	memAlloc               // the case's AllocHostPinned buffer
	memReg                 // the case's Go slice pinned with PinHostBuffer
)

func (m pinMem) pinned() bool { return m == memAlloc || m == memReg }

// The forms a case runs its batch in.
const (
	pinRun = iota
	pinAsync
	pinGraph
	pinForms
)

var pinFormNames = [pinForms]string{"Run", "RunAsync", "Graph"}

// pinReplay is the form the checks give a blocking Graph.Replay, which may
// land its read like Run (never drawn: a Graph case replays in both ways).
const pinReplay = pinForms

type pinUp struct {
	buf, off, n int
	src         pinMem
}

type pinRead struct {
	buf, off, n int
	into        pinMem // Batch.Into[i]'s memory (memNone: nil)
	slot        pinMem // memory of the dst slot's capacity (memNone: nil slot)
	short       bool   // the slot's capacity is one byte short of the read
}

type pinOp struct {
	buf   int
	value uint32
}

// pinCase is one drawn batch and the way it runs.
type pinCase struct {
	form    int
	tuning  int // index into pinTunings
	atomic  bool
	lens    []int
	fills   []pinOp // value's low byte
	ups     []pinUp
	xors    []pinOp
	reads   []pinRead
	into    bool   // Batch.Into is set
	replays []bool // Graph: each replay, true for ReplayAsync
	seed    int64
}

// pinTunings are the plans the batch's staged copies may take: the
// default ones, packed wherever two copies or more, staged in chunks; and
// the default ones with copy kernels writing the direct reads they can.
var pinTunings = [][]core.Option{
	nil,
	{core.WithPlanTuning(xferplan.Tuning{PackMinCopies: 2, Only: xferplan.Kinds(xferplan.Packed, xferplan.Staged)}),
		core.WithPlanModel(xferToyModel)},
	{core.WithPlanTuning(xferplan.Tuning{PackMinCopies: -1, StageMin: 32, MinChunk: 16, MaxChunk: 32, Blocks: 2,
		Only: xferplan.Kinds(xferplan.Staged)}), core.WithPlanModel(xferToyModel)},
	{core.WithKernelReads(4, 1<<20)}, // every whole-word read into AllocHostPinned memory behind a step: a copy kernel
}

// pinStaged and pinKernelReads are the indexes of the tunings under which
// single copies are staged in chunks (a Run's one read into Go memory then
// lands in chunks after the work) and copy kernels write the reads that
// qualify at any size.
const (
	pinStaged      = 2
	pinKernelReads = 3
)

func drawPinCase(r *rand.Rand) *pinCase {
	c := &pinCase{form: r.Intn(pinForms), tuning: r.Intn(len(pinTunings)), atomic: r.Intn(6) == 0, seed: r.Int63()}
	for range 1 + r.Intn(3) {
		c.lens = append(c.lens, 1+r.Intn([]int{16, 96, 200}[r.Intn(3)]))
	}
	span := func(buf int) (int, int) {
		l := c.lens[buf]
		if r.Intn(8) == 0 {
			return r.Intn(l + 1), 0
		}
		off := r.Intn(l)
		return off, 1 + r.Intn(l-off)
	}
	mem := func() pinMem { return []pinMem{memGo, memAlloc, memAlloc, memReg}[r.Intn(4)] }
	for range r.Intn(2) {
		c.fills = append(c.fills, pinOp{buf: r.Intn(len(c.lens)), value: uint32(r.Intn(256))})
	}
	for range r.Intn(6) {
		u := pinUp{buf: r.Intn(len(c.lens)), src: mem()}
		u.off, u.n = span(u.buf)
		c.ups = append(c.ups, u)
	}
	for range r.Intn(3) {
		if b := r.Intn(len(c.lens)); c.lens[b] >= 4 {
			c.xors = append(c.xors, pinOp{buf: b, value: r.Uint32()})
		}
	}
	if c.tuning == pinKernelReads && len(c.xors) == 0 && c.lens[0] >= 4 && r.Intn(2) == 0 {
		c.xors = append(c.xors, pinOp{buf: 0, value: r.Uint32()}) // a step for reads to follow
	}
	c.into = r.Intn(2) == 0
	for range r.Intn(5) {
		d := pinRead{buf: r.Intn(len(c.lens)), slot: []pinMem{memNone, memGo, memAlloc, memReg}[r.Intn(4)], short: r.Intn(5) == 0}
		d.off, d.n = span(d.buf)
		if c.into && r.Intn(3) > 0 {
			d.into = mem()
		}
		if c.tuning == pinKernelReads && r.Intn(2) == 0 {
			kernelRead(&d)
		}
		c.reads = append(c.reads, d)
	}
	if c.tuning == pinStaged && c.form != pinAsync && r.Intn(2) == 0 {
		c.reads = []pinRead{landingRead(r, c)}
	}
	if c.form == pinGraph {
		for range 2 + r.Intn(2) {
			c.replays = append(c.replays, r.Intn(3) == 0)
		}
	}
	return c
}

// landingRead returns a read a Run or a Replay may land in chunks: all of
// c's first buffer into Go memory (Into's, when c gives one, else the dst
// slot's).
func landingRead(r *rand.Rand, c *pinCase) pinRead {
	d := pinRead{buf: 0, n: c.lens[0], slot: []pinMem{memNone, memGo}[r.Intn(2)]}
	if c.into {
		d.into = memGo
	}
	return d
}

// kernelRead makes d a read a copy kernel can write: whole words into
// AllocHostPinned memory (Into's, when it has one, else its dst slot's,
// which then has the capacity).
func kernelRead(d *pinRead) {
	d.off, d.n = d.off&^3, d.n&^3
	d.slot, d.short = memAlloc, false
	if d.into != memNone {
		d.into = memAlloc
	}
}

func (c *pinCase) String() string {
	return fmt.Sprintf("%s tuning=%d atomic=%v lens=%v fills=%v ups=%+v xors=%v reads=%+v into=%v replays=%v seed=%d",
		pinFormNames[c.form], c.tuning, c.atomic, c.lens, c.fills, c.ups, c.xors, c.reads, c.into, c.replays, c.seed)
}

// directUps says which uploads the Backend must move by DMA from Data.
func (c *pinCase) directUps() []bool {
	out := make([]bool, len(c.ups))
	for i, u := range c.ups {
		out[i] = u.src.pinned() && u.n > 0
		for j, v := range c.ups {
			if i != j && v.n > 0 && v.buf == u.buf && u.off < v.off+v.n && v.off < u.off+u.n {
				out[i] = false
			}
		}
	}
	return out
}

// directReads says which reads land in their pinned destination by DMA
// when the batch runs in form.
func (c *pinCase) directReads(form int) []bool {
	out := make([]bool, len(c.reads))
	for i, d := range c.reads {
		if d.n == 0 || c.atomic {
			continue
		}
		switch {
		case d.into != memNone:
			out[i] = d.into.pinned()
		case form == pinRun:
			out[i] = d.slot.pinned() && !d.short
		}
	}
	return out
}

// mayLand reports whether a Run or a blocking Replay of the batch (form)
// may land its one read in chunks after the work, a sync point each
// (core's Run and Graph.Replay): one read, not empty, not direct,
// readbacks not atomic.
func (c *pinCase) mayLand(form int) bool {
	return (form == pinRun || form == pinReplay) && !c.atomic && len(c.reads) == 1 && c.reads[0].n > 0 && !c.directReads(form)[0]
}

// work reports whether the batch reaches the device at all.
func (c *pinCase) work() bool {
	if len(c.fills)+len(c.xors) > 0 {
		return true
	}
	for _, u := range c.ups {
		if u.n > 0 {
			return true
		}
	}
	for _, d := range c.reads {
		if d.n > 0 {
			return true
		}
	}
	return false
}

// wantTelemetry is what one run of the batch in form adds.
func (c *pinCase) wantTelemetry(form int) core.Telemetry {
	var t core.Telemetry
	up := make([][]bool, len(c.lens))
	rd := make([][]bool, len(c.lens))
	for i := range c.lens {
		up[i], rd[i] = make([]bool, c.lens[i]), make([]bool, c.lens[i])
	}
	for _, u := range c.ups {
		for k := u.off; k < u.off+u.n; k++ {
			up[u.buf][k] = true
		}
		if u.n > 0 {
			t.RequestedCopies++
		}
	}
	direct := c.directReads(form)
	for i, d := range c.reads {
		for k := d.off; k < d.off+d.n && !direct[i]; k++ {
			rd[d.buf][k] = true
		}
		if direct[i] {
			t.DeviceToHostBytes += uint64(d.n)
		}
		if d.n > 0 {
			t.RequestedCopies++
		}
	}
	for i := range c.lens {
		for k := range c.lens[i] {
			t.HostToDeviceBytes += b2u(up[i][k])
			t.DeviceToHostBytes += b2u(rd[i][k])
		}
	}
	t.UploadOps, t.ReadbackOps = b2u(t.HostToDeviceBytes > 0), b2u(t.DeviceToHostBytes > 0)
	t.MemsetOps, t.KernelLaunches = uint64(len(c.fills)), uint64(len(c.xors))
	t.SyncPoints = b2u(c.work())
	return t
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// model returns the buffers' bytes after the batch ran on init with the
// uploads' bytes data, and the reads' bytes.
func (c *pinCase) model(init, data [][]byte) (after, reads [][]byte) {
	after = make([][]byte, len(init))
	for i := range init {
		after[i] = bytes.Clone(init[i])
	}
	for _, f := range c.fills {
		for k := range after[f.buf] {
			after[f.buf][k] = byte(f.value)
		}
	}
	for i, u := range c.ups {
		copy(after[u.buf][u.off:], data[i])
	}
	for _, x := range c.xors {
		m := after[x.buf]
		for k := 0; k+4 <= len(m); k += 4 {
			v := uint32(m[k]) | uint32(m[k+1])<<8 | uint32(m[k+2])<<16 | uint32(m[k+3])<<24
			v ^= x.value
			m[k], m[k+1], m[k+2], m[k+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
		}
	}
	for _, d := range c.reads {
		reads = append(reads, bytes.Clone(after[d.buf][d.off:d.off+d.n]))
	}
	return after, reads
}

// pinSeen counts what the fault-free cases covered.
type pinSeen struct {
	directUps, sharedPinnedUps, intoDirect, slotDirect, atomicPinned, kernelReads, landed int
	forms                                                                                 [pinForms]int
}

func TestCoreBatchPinnedAgreesWithModel(t *testing.T) {
	seed := coreSeed(t)
	n := 250
	if coreLong() {
		n = 10000
	}
	var seen pinSeen
	params := gopter.DefaultTestParametersWithSeed(seed)
	params.MinSuccessfulTests = n
	props := gopter.NewProperties(params)
	props.Property("batches over pinned memory agree with the model", prop.ForAll(func(c *pinCase) string {
		if err := runPinCase(c, &seen); err != nil {
			return err.Error()
		}
		return ""
	}, genPinCase()))
	props.TestingRun(t)
	t.Logf("covered: %+v", seen)
	assert.Positive(t, seen.directUps, "an upload moved from pinned Data by DMA")
	assert.Positive(t, seen.sharedPinnedUps, "a pinned upload that meets another, staged")
	assert.Positive(t, seen.intoDirect, "a read into pinned Into by DMA")
	assert.Positive(t, seen.slotDirect, "a read into Run's pinned dst slot by DMA")
	assert.Positive(t, seen.atomicPinned, "a read into pinned memory staged under WithAtomicReadbacks")
	assert.Positive(t, seen.kernelReads, "a read into pinned memory written by a copy kernel")
	assert.Positive(t, seen.landed, "a Run's read landed in chunks after the work")
	for f, k := range seen.forms {
		assert.Positive(t, k, "cases run as %s", pinFormNames[f])
	}
}

func genPinCase() gopter.Gen {
	return func(p *gopter.GenParameters) *gopter.GenResult {
		return gopter.NewGenResult(drawPinCase(p.Rng), gopter.NoShrinker)
	}
}

func runPinCase(c *pinCase, seen *pinSeen) (err error) {
	e, err := newPinEnv(c)
	if e == nil {
		return err
	}
	defer func() { err = errors.Join(err, e.close()) }()
	if err != nil {
		return err
	}
	e.build()
	if err := e.reset(); err != nil {
		return err
	}
	seen.forms[c.form]++
	for i, d := range c.directUps() {
		seen.directUps += int(b2u(d))
		seen.sharedPinnedUps += int(b2u(!d && c.ups[i].src.pinned() && c.ups[i].n > 0))
	}
	for i, d := range c.directReads(c.form) {
		r := c.reads[i]
		seen.intoDirect += int(b2u(d && r.into != memNone))
		seen.slotDirect += int(b2u(d && r.into == memNone))
		seen.atomicPinned += int(b2u(c.atomic && r.n > 0 && (r.into.pinned() || r.into == memNone && r.slot.pinned())))
	}
	switch c.form {
	case pinRun:
		err = e.checkRun("Run")
	case pinAsync:
		_, _, err = e.checkAsync(func() (*core.Pending, error) { return e.b.RunAsync(e.batch) }, pinAsync, "RunAsync")
	default:
		err = e.checkGraph()
	}
	if c.tuning == pinKernelReads {
		seen.kernelReads += int(e.b.Telemetry().PackedLaunches) // no packed plan at these counts: each is a copy kernel
	}
	seen.landed += e.landed
	return err
}
