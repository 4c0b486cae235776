package proptest

// TestCoreBatchPinnedAgreesWithModel's batches (core_batchpinned_test.go)
// with one driver failure injected into whatever phase the draw hits:
// staging, stream and event creation, module loading, memsets, copies,
// launches, event records, fences, and a graph's capture, instantiation,
// upload and launch; half the time the drain after it fails too, so the
// failed work's stream goes to the quarantine. Every case starts with cold
// pools (the buffers' bytes are written straight into device memory), so
// the batch call itself creates its streams, events and staging. The
// contract:
//
//   - a failed call returns a *core.Error and leaves the caller's Go memory
//     as it was: the dst slots' headers and bytes, and Go Into slices
//     (pinned destinations may have been written, as documented, unless
//     WithAtomicReadbacks is on);
//   - a call that succeeds agrees with the model, as without faults;
//   - the pinned memory a direct copy uses refuses PinnedBuffer.Free and
//     UnpinHostBuffer while the work that uses it is uncollected (a
//     Pending), open (a Graph, whether its replay failed or not) or
//     quarantined (a failed stream that cannot be synchronized);
//   - once the work is collected and the device recovers, that memory can
//     be freed and unpinned, the Backend keeps working, and Close leaves
//     nothing on the device.

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"testing"
	"unsafe"

	"github.com/leanovate/gopter"
	"github.com/leanovate/gopter/prop"
	"github.com/stretchr/testify/assert"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// pinFaultOps are the operations a batch, its Pending or its graph calls.
var pinFaultOps = []sim.Op{sim.OpHostAlloc, sim.OpMemAlloc, sim.OpStreamCreate, sim.OpEventCreate, sim.OpModuleLoad,
	sim.OpMemsetD8Async, sim.OpMemcpyHtoDAsync, sim.OpMemcpyDtoHAsync, sim.OpLaunch, sim.OpEventRecord,
	sim.OpStreamSynchronize, sim.OpStreamBeginCapture, sim.OpStreamEndCapture, sim.OpGraphInstantiate,
	sim.OpGraphUpload, sim.OpGraphLaunch}

// pinFaultCase is a batch, the way it runs (a graph replays once), and
// the fault: the nth call of op from the batch call on fails, and with
// drain the stream synchronization after it too.
type pinFaultCase struct {
	*pinCase
	op    sim.Op
	nth   int
	drain bool
}

func (c *pinFaultCase) String() string {
	return fmt.Sprintf("%v fails (call %d, drain fails too: %v) in %s", c.op, c.nth, c.drain, c.pinCase)
}

func drawPinFaultCase(r *rand.Rand) *pinFaultCase {
	c := &pinFaultCase{pinCase: drawPinCase(r), op: pinFaultOps[r.Intn(len(pinFaultOps))], nth: 1 + r.Intn(3),
		drain: r.Intn(2) == 0}
	if len(c.replays) > 0 {
		c.replays = c.replays[:1]
	}
	if c.nth > 1 && r.Intn(2) == 0 {
		c.nth = 1
	}
	return c
}

// pinFaultSeen counts what the cases covered.
type pinFaultSeen struct {
	failedBy            map[sim.Op]int
	quarantinedInFlight int // cases whose quarantine was checked to hold pinned memory
	openInFlight        int // cases whose uncollected Pending or open Graph was checked to hold it
}

func TestCoreBatchPinnedFaults(t *testing.T) {
	seed := coreSeed(t)
	n := 300
	if coreLong() {
		n = 10000
	}
	seen := pinFaultSeen{failedBy: map[sim.Op]int{}}
	params := gopter.DefaultTestParametersWithSeed(seed)
	params.MinSuccessfulTests = n
	props := gopter.NewProperties(params)
	props.Property("failed batches over pinned memory leak nothing and change no Go memory", prop.ForAll(
		func(c *pinFaultCase) string {
			if err := runPinFaultCase(c, &seen); err != nil {
				return err.Error()
			}
			return ""
		}, func(p *gopter.GenParameters) *gopter.GenResult {
			return gopter.NewGenResult(drawPinFaultCase(p.Rng), gopter.NoShrinker)
		}))
	props.TestingRun(t)
	t.Logf("failed by: %v; pinned memory checked in flight: %d quarantined, %d uncollected or open",
		seen.failedBy, seen.quarantinedInFlight, seen.openInFlight)
	for _, op := range pinFaultOps {
		if op != sim.OpMemAlloc { // a packed plan without device staging falls back to per-copy
			assert.Positive(t, seen.failedBy[op], "a failure of %v failed some call", op)
		}
	}
	assert.Positive(t, seen.quarantinedInFlight, "a quarantine held pinned memory")
	assert.Positive(t, seen.openInFlight, "uncollected work held pinned memory")
}

func runPinFaultCase(c *pinFaultCase, seen *pinFaultSeen) (err error) {
	e, err := newPinEnv(c.pinCase)
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
	e.dev.FailNth(c.op, c.nth, cudaapi.CUDA_ERROR_UNKNOWN)
	if c.drain {
		if c.op == sim.OpStreamSynchronize {
			e.dev.FailNth(sim.OpStreamSynchronize, c.nth+1, cudaapi.CUDA_ERROR_UNKNOWN)
		} else {
			e.dev.FailNth(sim.OpStreamSynchronize, 1, cudaapi.CUDA_ERROR_UNKNOWN)
		}
	}
	f := &pinFaulted{e: e, seen: seen}
	switch c.form {
	case pinRun:
		err = f.run()
	case pinAsync:
		err = f.async()
	default:
		err = f.graph()
	}
	e.dev.ClearFaults()
	if err != nil {
		return err
	}
	if f.failed != nil {
		seen.failedBy[c.op]++
	}
	return e.afterFault()
}

// pinFaulted runs one case's batch under its fault.
type pinFaulted struct {
	e           *pinEnv
	seen        *pinFaultSeen
	failed      error // the call's failure, if any
	quarantined bool  // the failed work's stream went to the quarantine
}

// judge checks one call's outcome: a failure must be a *core.Error that
// left the caller's Go memory (and, with out, dst's slots) as it was; a
// success must agree with the model (results out from dst).
func (f *pinFaulted) judge(what string, err error, form int, out, dst [][]byte) error {
	e := f.e
	if err == nil {
		if out == nil && len(e.c.reads) == 0 {
			return nil
		}
		e.dev.ClearFaults() // a fault not yet fired must not hit the check's own calls
		_, cerr := e.check(what, form, out, dst, e.data)
		return cerr
	}
	f.failed = err
	var ce *core.Error
	if !errors.As(err, &ce) {
		return fmt.Errorf("%s failed with %T, not *core.Error: %v", what, err, err)
	}
	if out != nil && (unsafe.SliceData(out) != unsafe.SliceData(dst) || len(out) != len(dst)) {
		return fmt.Errorf("failed %s did not return dst", what)
	}
	for i := range dst {
		if unsafe.SliceData(dst[i]) != unsafe.SliceData(e.slots[i]) || len(dst[i]) != len(e.slots[i]) || cap(dst[i]) != cap(e.slots[i]) {
			return fmt.Errorf("failed %s changed dst slot %d's header", what, i)
		}
	}
	// A Run or a Replay that landed its read in chunks after the work may
	// have left some of the read's bytes in its destination (core's Run,
	// Graph.Replay); each byte of Go memory is then what was there or the
	// read's byte.
	var landed []byte
	if e.c.mayLand(form) {
		_, want := e.c.model(e.init, e.data)
		landed = want[0]
	}
	for _, d := range e.dests {
		// Under WithAtomicReadbacks pinned destinations are kept too.
		if (d.mem == memGo || e.c.atomic) && !keptOr(d.b, landed) {
			return fmt.Errorf("failed %s (%v) wrote the caller's memory (%v): %x", what, err, d.mem, d.b)
		}
	}
	return nil
}

// keptOr reports whether every byte of b is still the fill (0xee) or the
// byte of landed at its place.
func keptOr(b, landed []byte) bool {
	for i, v := range b {
		if v != 0xee && (i >= len(landed) || v != landed[i]) {
			return false
		}
	}
	return true
}

// heldIfQuarantined checks, when the failed work's stream went to the
// quarantine, that the pinned memory its direct copies use stays in
// flight while that stream cannot be synchronized.
func (f *pinFaulted) heldIfQuarantined(what string) error {
	e := f.e
	if f.failed == nil || e.b.LaunchResourceCounts().Quarantined == 0 {
		return nil
	}
	f.quarantined = true
	e.dev.FailRate(1, 1, sim.OpStreamSynchronize)
	defer e.dev.FailRate(1, 0)
	if e.inAlloc || e.inReg {
		f.seen.quarantinedInFlight++
	}
	return e.busy(what + " quarantined")
}

func (f *pinFaulted) run() error {
	dst := f.e.dst()
	out, err := f.e.b.Run(f.e.batch, dst)
	if err := f.judge("Run", err, pinRun, out, dst); err != nil {
		return err
	}
	return f.heldIfQuarantined("Run")
}

// collect waits for pd and takes its reads into a fresh dst, judging the
// outcome (what names the call that queued the work).
func (f *pinFaulted) collect(what string, pd *core.Pending, form int) error {
	e := f.e
	if e.inAlloc || e.inReg {
		f.seen.openInFlight++
	}
	if err := e.busy(what + " uncollected"); err != nil {
		return err
	}
	dst := e.dst()
	var out [][]byte
	err := pd.Await()
	if err == nil {
		out, err = pd.AwaitInto(dst)
	} else if _, aerr := pd.AwaitInto(dst); aerr == nil {
		return fmt.Errorf("%s: AwaitInto succeeded after Await failed with %v", what, err)
	}
	if err != nil {
		out = dst // AwaitInto returned it; judge checks the slots themselves
	}
	if jerr := f.judge(what+" collected", err, form, out, dst); jerr != nil {
		return jerr
	}
	return errors.Join(f.heldIfQuarantined(what), wrapErr("Pending.Close", pd.Close()))
}

func (f *pinFaulted) async() error {
	pd, err := f.e.b.RunAsync(f.e.batch)
	if err != nil {
		if jerr := f.judge("RunAsync", err, pinAsync, nil, f.e.dst()); jerr != nil {
			return jerr
		}
		return f.heldIfQuarantined("RunAsync")
	}
	return f.collect("RunAsync", pd, pinAsync)
}

func (f *pinFaulted) graph() error {
	e := f.e
	g, err := e.b.Capture(e.batch)
	if err != nil {
		// A failed capture ran nothing: the pinned memory is free at once
		// (afterFault), whatever became of the graph upload's stream.
		return f.judge("Capture", err, pinGraph, nil, e.dst())
	}
	defer g.Close()
	if e.inAlloc || e.inReg {
		f.seen.openInFlight++
	}
	if err := e.busy("captured"); err != nil {
		return err
	}
	if e.c.replays[0] {
		pd, err := g.ReplayAsync()
		if err == nil {
			err = f.collect("ReplayAsync", pd, pinGraph)
		} else {
			err = errors.Join(f.judge("ReplayAsync", err, pinGraph, nil, e.dst()), f.heldIfQuarantined("ReplayAsync"))
		}
		if err != nil {
			return err
		}
	} else {
		dst := e.dst()
		out, err := g.Replay(dst)
		if err := errors.Join(f.judge("Replay", err, pinReplay, out, dst), f.heldIfQuarantined("Replay")); err != nil {
			return err
		}
	}
	// A replay whose stream went to the quarantine broke the graph (it
	// never launches again) and handed what it holds to the quarantine,
	// which lets the pinned memory go once the stream synchronizes; any
	// other graph holds it until Close.
	if !f.quarantined {
		if err := e.busy("graph open after its replay"); err != nil {
			return err
		}
	}
	e.dev.ClearFaults()
	return wrapErr("Graph.Close", g.Close())
}

// afterFault checks, with the faults gone and the work collected, that
// the pinned memory can be released at once and that the Backend still
// runs a batch.
func (e *pinEnv) afterFault() error {
	if err := e.p.Free(); err != nil {
		return fmt.Errorf("PinnedBuffer.Free once the work was collected: %w", err)
	}
	e.p = nil
	if err := e.b.UnpinHostBuffer(unsafe.Pointer(&e.reg[0])); err != nil {
		return fmt.Errorf("UnpinHostBuffer once the work was collected: %w", err)
	}
	e.reg = nil
	data := randomXferBytes(e.r, e.hs[0].Len)
	out, err := e.b.Run(core.Batch{Uploads: []core.UploadAt{{Buf: e.hs[0], Data: data}}, Reads: []core.Range{e.hs[0].All()}}, nil)
	if err != nil {
		return fmt.Errorf("Run after the fault: %w", err)
	}
	if !bytes.Equal(out[0], data) {
		return errors.New("Run after the fault read other bytes")
	}
	return nil
}
