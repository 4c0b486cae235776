package proptest

// Transfers of 16 MiB and more: single uploads and readbacks that core's
// planner moves in chunks through a few staging blocks (several fences per
// call) or directly. The steps here run in a
// property of their own on a larger simulated device, mixed with the
// ordinary steps, so the pipelined path meets pools, dispatches, faults and
// the quarantine like every other path.

import (
	"fmt"
	"testing"
	"unsafe"

	"github.com/leanovate/gopter"
	"github.com/leanovate/gopter/commands"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// pipelinedMin is the documented size from which a single transfer is
// pipelined (Download's contract: 64 MiB or more).
const pipelinedMin = 64 << 20

// bigSizes are the sizes big steps allocate: below, at and past the
// pipelined threshold, odd lengths included (a tapered last chunk).
var bigSizes = []int{16 << 20, pipelinedMin - 1, pipelinedMin, pipelinedMin + 4097, 72<<20 + 3}

// bigStep is one large transfer: allocate (op 0), Upload (1),
// Upload at an odd offset (2), Download with a chosen
// destination (3), Download (4) or Download (5).
type bigStep struct {
	withFault
	op, pick, size, seed, dstMode int
}

func drawBig(src entropy) *bigStep {
	return &bigStep{op: src.intn(6), pick: src.intn(1 << 20), size: bigSizes[src.intn(len(bigSizes))],
		seed: src.intn(1 << 16), dstMode: src.intn(4)}
}

func (s *bigStep) setFault(f *faultSpec) { s.f = f }
func (s *bigStep) String() string {
	return fmt.Sprintf("big(op=%d pick=%d size=%d seed=%d dst=%d)%s", s.op, s.pick, s.size, s.seed, s.dstMode, s.faultString())
}

// bigBuffer returns a live buffer of 16 MiB or more, if there is one.
func (r *runner) bigBuffer(pick int) (core.Buffer, bool) {
	var big []core.Buffer
	for _, h := range r.m.order {
		if r.m.valid(h) && h.Len >= 16<<20 {
			big = append(big, h)
		}
	}
	if len(big) == 0 {
		return core.Buffer{}, false
	}
	return big[pick%len(big)], true
}

func (s *bigStep) run(r *runner) error {
	if s.op == 0 {
		return (&allocStep{withFault: s.withFault, size: s.size}).run(r)
	}
	h, ok := r.bigBuffer(s.pick)
	if !ok {
		// Nothing to move yet: allocate instead, so short sequences
		// still reach the large paths.
		return (&allocStep{withFault: s.withFault, size: s.size}).run(r)
	}
	off := 0
	n := h.Len
	if s.op == 2 || s.op == 5 {
		off = 1 + s.seed%4095
		n = h.Len - off - s.seed%3
	}
	switch s.op {
	case 1, 2:
		data := patternData(s.seed, n)
		call := "Upload"
		var err error
		if s.op == 1 {
			err = r.b.Upload(core.UploadAt{Buf: h, Data: data})
		} else {
			call = "Upload"
			err = r.b.Upload(core.UploadAt{Buf: h, Offset: off, Data: data})
		}
		r.logf("%s %+v off=%d n=%d", call, h, off, n)
		out, verr := r.judge(call, err, 0)
		if verr != nil {
			return verr
		}
		if out != succeeded {
			r.m.forget(h.ID, span{off, off + n})
			r.failedTargets(h.ID, span{off, off + n})
			return nil
		}
		r.m.write(h.ID, off, data)
		r.m.tel.HostToDeviceBytes += uint64(n)
		r.m.tel.UploadOps++
		if err := r.expectLarge(call, n, sim.OpMemcpyHtoDAsync); err != nil {
			return err
		}
		return r.audit(h.ID)
	default:
		return s.read(r, h, off, n)
	}
}

// read runs one of the large readbacks and checks the bytes, the caller's
// destination and the calls.
func (s *bigStep) read(r *runner, h core.Buffer, off, n int) error {
	var (
		got, dst []byte
		err      error
		call     string
	)
	switch s.op {
	case 3:
		call = "Download"
		switch s.dstMode {
		case 0:
			dst = make([]byte, n) // capacity equal to the length needed
		case 1:
			dst = make([]byte, 5, n+4096)
		case 2:
			dst = make([]byte, 3, n-1) // one byte short: a new slice
		}
		got, err = r.b.Download(h.All(), dst)
	case 4:
		call = "Download"
		got, err = r.b.Download(h.All(), nil)
	default:
		call = "Download"
		got, err = r.b.Download(h.Slice(off, n), nil)
	}
	r.logf("%s %+v off=%d n=%d dst=%d", call, h, off, n, s.dstMode)
	out, verr := r.judge(call, err, 0)
	if verr != nil {
		return verr
	}
	if out != succeeded {
		if s.op == 3 && (len(got) != len(dst) || cap(got) != cap(dst) || unsafe.SliceData(got) != unsafe.SliceData(dst)) {
			return fmt.Errorf("failed %s did not return dst unchanged", call)
		}
		if s.op != 3 && got != nil {
			return fmt.Errorf("failed %s returned %d bytes", call, len(got))
		}
		r.failedTargets(h.ID, span{})
		return nil
	}
	if len(got) != n {
		return fmt.Errorf("%s returned %d bytes, want %d", call, len(got), n)
	}
	if s.op == 3 {
		if err := checkReuse(dst, got, n); err != nil {
			return fmt.Errorf("%s: %w", call, err)
		}
	}
	if err := r.m.checkBytes(h.ID, off, got); err != nil {
		return fmt.Errorf("%s: %w", call, err)
	}
	r.m.tel.DeviceToHostBytes += uint64(n)
	r.m.tel.ReadbackOps++
	return r.expectLarge(call, n, sim.OpMemcpyDtoHAsync)
}

// expectLarge checks the calls and telemetry of one successful large
// transfer of n bytes: one request, at least one driver copy, each counted
// in DeviceCopies, no kernel launch, nothing but copies, event and stream
// waits and pooled resources; and between one and one per copy host waits
// (how core's planner splits and waits for the chunks, on how many streams,
// is its choice).
func (r *runner) expectLarge(call string, n int, op sim.Op) error {
	t := &r.m.tel
	t.RequestedCopies++
	got := r.callsDelta()
	r.dropRetries(got, nil)
	copies := got[op]
	t.DeviceCopies += copies
	if got[sim.OpLaunch] != 0 || copies == 0 {
		return fmt.Errorf("%s of %d bytes: device calls %v, want copies and no launch", call, n, got)
	}
	if waits := r.b.Telemetry().SyncPoints - t.SyncPoints; waits < 1 || waits > copies {
		return fmt.Errorf("%s of %d bytes in %d copies counted %d host waits", call, n, copies, waits)
	} else {
		t.SyncPoints += waits
	}
	if copies > 1 {
		countOutcome(call+" (in chunks)", succeeded)
	}
	for o := range got {
		switch o {
		case op, sim.OpStreamSynchronize, sim.OpEventSynchronize, sim.OpEventRecord, sim.OpStreamWaitEvent, sim.OpStreamQuery, sim.OpEventQuery:
		default:
			if !resourceOps[o] {
				return fmt.Errorf("%s: device calls %v; %v is not expected", call, got, o)
			}
		}
	}
	return nil
}

// TestCoreStateMachinePipelined runs big steps and frees on a 320 MiB
// device, with a chosen fault on about a quarter of the steps.
func TestCoreStateMachinePipelined(t *testing.T) {
	seed := coreSeed(t)
	size := propSize{3, 8}
	if coreLong() {
		size = propSize{60, 40}
	}
	fs, err := newForeign()
	require.NoError(t, err)
	stats := snapshotCoreStats()
	var teardown error
	kinds := stepKinds{faults: true}
	cmds := coreCommands(faultsChosen, kinds, fs.h, &teardown).(*commands.ProtoCommands)
	cmds.InitialStateGen = func(p *gopter.GenParameters) *gopter.GenResult {
		cfg := drawConfig(randEntropy{p.Rng}, faultsChosen)
		cfg.total = 320 << 20
		return gopter.NewGenResult(&genState{cfg: cfg}, gopter.NoShrinker)
	}
	cmds.GenCommandFunc = func(commands.State) gopter.Gen {
		return func(p *gopter.GenParameters) *gopter.GenResult {
			src := randEntropy{p.Rng}
			var s step
			if chance(src, 60) {
				b := drawBig(src)
				if chance(src, 25) {
					b.f = drawFault(src)
				}
				s = b
			} else {
				// Not the ordinary transfer steps: their staged-plan model
				// (expectStaged) covers the planner's toy tunings, not
				// transfers this large on several streams.
				s = &freeStep{pick: src.intn(1 << 20)}
			}
			return gopter.NewGenResult(stepCommand{s}, gopter.NoShrinker)
		}
	}
	params := gopter.DefaultTestParametersWithSeed(seed)
	params.MinSuccessfulTests = size.sequences
	params.MaxSize = size.maxSteps
	params.MaxShrinkCount = 20
	props := gopter.NewProperties(params)
	props.Property("large transfers agree with the model", commands.Prop(cmds))
	props.TestingRun(t)
	require.NoError(t, teardown)
	require.NoError(t, fs.close())
	logCoreStats(t, stats)
}

// TestCorePipelinedSequence runs one fixed sequence of large transfers
// through the runner (every check after every step), so CI always takes the
// pipelined paths: odd lengths and offsets, a destination whose capacity is
// exactly the length, one byte short, and roomy.
func TestCorePipelinedSequence(t *testing.T) {
	cfg := runConfig{total: 320 << 20, devicePoolCap: core.DefaultDevicePoolCap, pinnedPoolCap: core.DefaultPinnedPoolCap,
		poolLimit: core.DefaultResidentPoolLimit, optPoolCap: -1, staticCap: -1}
	r, err := newRunner(cfg, core.Buffer{})
	require.NoError(t, err)
	steps := []step{
		&bigStep{op: 0, size: pipelinedMin + 4097},
		&bigStep{op: 1, seed: 7},
		&bigStep{op: 3, dstMode: 0},
		&bigStep{op: 3, dstMode: 1},
		&bigStep{op: 3, dstMode: 2},
		&bigStep{op: 2, seed: 1234},
		&bigStep{op: 5, seed: 99},
		&bigStep{op: 4},
		&bigStep{op: 0, size: 16 << 20},
		&bigStep{op: 1, pick: 1, seed: 3},
		&bigStep{op: 3, pick: 1, dstMode: 0},
	}
	for _, s := range steps {
		require.NoError(t, r.do(s))
	}
	require.NoError(t, r.closeAndCheck())
}
