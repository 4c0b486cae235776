package proptest

// The steps (commands) of the core.Backend state machine: how each is drawn
// from a source of entropy, and the gopter glue that runs them. What the
// model predicts for each step and what is checked after it live in the
// core_cmd_*_test.go files, one theme each. One drawing function serves
// gopter (math/rand through gopter's generator parameters), the concurrency
// property (math/rand) and FuzzBackendSequence (the fuzzer's bytes), so all
// three explore the same command language.

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/leanovate/gopter"
	"github.com/leanovate/gopter/commands"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
)

// entropy hands out the choices a step is drawn from.
type entropy interface {
	// intn returns a choice in [0, n); n > 0.
	intn(n int) int
}

type randEntropy struct{ r *rand.Rand }

func (e randEntropy) intn(n int) int { return e.r.Intn(n) }

// byteEntropy reads choices from a fuzzer's bytes; past the end every choice
// is 0.
type byteEntropy struct{ b []byte }

func (e *byteEntropy) intn(n int) int {
	if n <= 1 {
		return 0
	}
	need := 1
	switch {
	case n > 1<<16:
		need = 4
	case n > 1<<8:
		need = 2
	}
	var v uint32
	for i := 0; i < need; i++ {
		v <<= 8
		if len(e.b) > 0 {
			v |= uint32(e.b[0])
			e.b = e.b[1:]
		}
	}
	return int(v % uint32(n))
}

func (e *byteEntropy) done() bool { return len(e.b) == 0 }

func chance(src entropy, pct int) bool { return src.intn(100) < pct }

// pattern is the source of upload bytes: data for seed s is a window into it,
// copied with copy (cheap under the race detector, unlike a byte loop).
var pattern = func() []byte {
	p := make([]byte, 1<<20+1024)
	x := uint32(2463534242)
	for i := range p {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		p[i] = byte(x >> 11)
	}
	return p
}()

// patternData returns n bytes of upload data for seed.
func patternData(seed, n int) []byte {
	out := make([]byte, max(n, 0))
	fillPattern(out, seed)
	return out
}

func fillPattern(dst []byte, seed int) {
	off := (seed & 0x7fffffff) % 1021
	for len(dst) > 0 {
		dst = dst[copy(dst, pattern[off:off+1<<20]):]
	}
}

// drawSize draws an allocation size: mostly small, some around power-of-two
// and pool-limit boundaries, some of a few MiB, and a few invalid.
func drawSize(src entropy) int {
	switch r := src.intn(100); {
	case r < 3:
		return -src.intn(2)
	case r < 40:
		return 1 + src.intn(256)
	case r < 65:
		return 257 + src.intn(64<<10)
	case r < 80:
		return 1<<(10+src.intn(12)) + src.intn(3) - 1
	case r < 92:
		return 64<<10 + src.intn(1<<20)
	default:
		return 1<<20 + src.intn(3<<20)
	}
}

// place is a byte range inside a handle, drawn before the handle's length is
// known and resolved against it when the step runs.
type place struct{ mode, a, b int }

// Place modes; the ones before placeZero name ranges that never fit.
const (
	placeOut    = iota // ends past the buffer
	placeNegOff        // negative offset
	placeNegLen        // negative length
	placePast          // starts past the end, zero length
	placeZero
	placeWhole
	placeIn
	placeSlot // slot a of b equal slots, its first half: wide batches of separate ranges
)

func drawPlace(src entropy, negLen bool) place {
	modes := [...]int{placeOut, placeNegOff, placeNegLen, placePast,
		placeZero, placeZero, placeWhole, placeWhole, placeWhole,
		placeIn, placeIn, placeIn, placeIn, placeIn, placeIn, placeIn, placeIn, placeIn, placeIn, placeIn, placeIn}
	m := modes[src.intn(len(modes))]
	if m == placeNegLen && !negLen {
		m = placeZero
	}
	return place{mode: m, a: src.intn(1 << 24), b: src.intn(1 << 24)}
}

// drawPlaces draws n places for a batch; most batches hold only ranges that
// fit (if their handles are live), so one bad item does not reject nearly
// every batch.
func drawPlaces(src entropy, n int, negLen bool) []place {
	clean := chance(src, 75)
	ps := make([]place, n)
	for i := range ps {
		switch {
		case i > 0 && chance(src, 25):
			ps[i] = ps[src.intn(i)] // the same range again, or one that shares its start
			ps[i].b += src.intn(64)
		default:
			ps[i] = drawPlace(src, negLen)
			if clean && ps[i].mode < placeZero {
				ps[i].mode = placeIn
			}
		}
	}
	return ps
}

// resolve returns the offset and length p names in a buffer of n bytes.
func (p place) resolve(n int) (off, length int) {
	n = max(n, 0)
	switch p.mode {
	case placeIn:
		off = p.a % (n + 1)
		return off, p.b % (n - off + 1)
	case placeZero:
		return p.a % (n + 1), 0
	case placeWhole:
		return 0, n
	case placeOut:
		off = p.a % (n + 1)
		return off, n - off + 1 + p.b%4
	case placeNegOff:
		return -1 - p.a%3, p.b % (n + 1)
	case placeNegLen:
		return p.a % (n + 1), -1 - p.b%2
	case placeSlot:
		return n * p.a / p.b, n / (2 * p.b)
	default:
		return n + 1 + p.a%3, 0
	}
}

func rangeOK(off, n, limit int) bool { return off >= 0 && n >= 0 && off <= limit-n }

// step is one command of the state machine.
type step interface {
	// run performs the step on the runner's Backend and model and returns a
	// violation of the properties, or nil.
	run(r *runner) error
	String() string
}

// withFault is embedded by steps that may carry a chosen fault.
type withFault struct{ f *faultSpec }

func (w withFault) chosenFault() *faultSpec { return w.f }

func (w withFault) faultString() string {
	if w.f == nil {
		return ""
	}
	return " !" + w.f.String()
}

// stepKinds limits what drawStep may produce.
type stepKinds struct {
	async     bool // asynchronous uploads, SynchronizeUploads, pinned memory
	close     bool // Close-and-reopen
	reset     bool // ResetTelemetry
	optimizer bool // OptimizerDispatcher pool and static cache
	faults    bool // attach chosen faults
	graphs    bool // Capture, replays and Graph.Close (core_graph_test.go)
}

var allKinds = stepKinds{async: true, close: true, reset: true, optimizer: true, graphs: true}

// drawStep draws one step.
func drawStep(src entropy, k stepKinds) step {
	type choice struct {
		w    int
		make func() step
	}
	choices := []choice{
		{14, func() step { return drawAlloc(src) }},
		{8, func() step { return &freeStep{pick: src.intn(1 << 20)} }},
		{6, func() step {
			return &uploadStep{pick: src.intn(1 << 20), delta: drawDelta(src), seed: src.intn(1 << 16)}
		}},
		{8, func() step {
			return &uploadAtStep{pick: src.intn(1 << 20), at: drawPlace(src, false), seed: src.intn(1 << 16)}
		}},
		{5, func() step { return drawUploadMany(src) }},
		{6, func() step { return drawUploadAtMany(src) }},
		{16, func() step { return drawRead(src) }},
		{2, func() step { return &ptrStep{pick: src.intn(1 << 20)} }},
		{6, func() step { return drawDispatch(src) }},
		{5, func() step { return &awaitStep{pick: src.intn(1 << 20), how: src.intn(4)} }},
		{3, func() step { return drawMemory(src) }},
	}
	if k.optimizer {
		choices = append(choices,
			choice{5, func() step { return &optAllocStep{size: drawPow2(src)} }},
			choice{4, func() step { return &optFreeStep{pick: src.intn(1 << 20)} }},
			choice{4, func() step { return drawStaticAcquire(src) }},
			choice{3, func() step { return &staticReleaseStep{pick: src.intn(1 << 20)} }},
		)
	}
	if k.async {
		choices = append(choices,
			choice{6, func() step { return drawAsync(src) }},
			choice{4, func() step { return &syncStep{} }},
			choice{3, func() step { return &allocPinnedStep{size: drawPinnedSize(src)} }},
			choice{2, func() step { return &freePinnedStep{pick: src.intn(1 << 20)} }},
			choice{3, func() step {
				return &pinStep{size: drawPinnedSize(src), mode: src.intn(5), pick: src.intn(1 << 20)}
			}},
			choice{2, func() step { return &unpinStep{pick: src.intn(1 << 20), mode: max(src.intn(6)-2, 0)} }},
		)
	}
	if k.reset {
		choices = append(choices, choice{1, func() step { return &resetStep{} }})
	}
	if k.graphs {
		for _, c := range graphChoices(src) {
			choices = append(choices, c)
		}
	}
	if k.close {
		choices = append(choices, choice{1, func() step { return &closeStep{try: src.intn(2) == 0} }})
	}
	for _, c := range extraSteps(src, k) {
		choices = append(choices, choice(c))
	}
	total := 0
	for _, c := range choices {
		total += c.w
	}
	x := src.intn(total)
	var s step
	for _, c := range choices {
		if x < c.w {
			s = c.make()
			break
		}
		x -= c.w
	}
	if k.faults && chance(src, 35) {
		f := drawFault(src)
		if fs, ok := s.(interface{ setFault(*faultSpec) }); ok {
			fs.setFault(f)
		}
	}
	return s
}

func drawDelta(src entropy) int {
	if chance(src, 85) {
		return 0
	}
	return src.intn(5) - 2
}

func drawPinnedSize(src entropy) int {
	switch r := src.intn(100); {
	case r < 4:
		return -src.intn(2)
	case r < 60:
		return 1 + src.intn(4096)
	default:
		return 4097 + src.intn(256<<10)
	}
}

// drawPicks draws n handle numbers, often repeating an earlier one so
// batches write and read the same buffer several times.
func drawPicks(src entropy, n int) []int {
	clean := chance(src, 75)
	picks := make([]int, n)
	for i := range picks {
		switch {
		case i > 0 && chance(src, 40):
			picks[i] = picks[src.intn(i)]
		case clean:
			picks[i] = pickLive(src.intn(1 << 20))
		default:
			picks[i] = src.intn(1 << 20)
		}
	}
	return picks
}

// packMinCopies is core's documented threshold (core/packed.go) from which a
// batch of fused copies may be packed into one DMA plus one kernel launch.
const packMinCopies = 32

// drawWide draws a wide batch: n separate ranges, one per equal slot of a
// single buffer, so the batch has n fused copies and may take the packed
// path. It returns the picks and the places.
func drawWide(src entropy) ([]int, []place) {
	n := packMinCopies - 2 + src.intn(40)
	pick := pickLive(src.intn(1 << 20))
	picks := make([]int, n)
	ps := make([]place, n)
	for i := range ps {
		picks[i] = pick
		ps[i] = place{mode: placeSlot, a: i, b: n}
	}
	return picks, ps
}

func drawCount(src entropy) int {
	if chance(src, 8) {
		return 0
	}
	return 1 + src.intn(6)
}

// ---- gopter glue ----

// genState is the gopter State: the sequence's configuration. Everything
// else a step needs is resolved when it runs (see core_model_test.go).
type genState struct{ cfg runConfig }

// stepCommand adapts a step to gopter's commands.Command.
type stepCommand struct{ s step }

func (c stepCommand) Run(sut commands.SystemUnderTest) commands.Result {
	if err := sut.(*runner).do(c.s); err != nil {
		return err
	}
	return nil
}
func (c stepCommand) NextState(st commands.State) commands.State { return st }
func (c stepCommand) PreCondition(commands.State) bool           { return true }
func (c stepCommand) PostCondition(_ commands.State, res commands.Result) *gopter.PropResult {
	if res != nil {
		return gopter.NewPropResult(false, res.(error).Error())
	}
	return &gopter.PropResult{Status: gopter.PropTrue}
}
func (c stepCommand) String() string { return c.s.String() }

// drawConfig draws a sequence's device and Backend configuration: a small
// device so budgets are hit, and pool settings from none to the defaults.
func drawConfig(src entropy, faults faultMode) runConfig {
	cfg := runConfig{
		total:         []uint64{32 << 20, 48 << 20, 64 << 20}[src.intn(3)],
		devicePoolCap: []uint64{core.DefaultDevicePoolCap, 0, 4 << 20}[src.intn(3)],
		pinnedPoolCap: []uint64{core.DefaultPinnedPoolCap, 0, 1 << 20}[src.intn(3)],
		poolLimit:     []int{core.DefaultResidentPoolLimit, 0, 64 << 10}[src.intn(3)],
		faults:        faults,
	}
	cfg.optPoolCap = []int{-1, 0, 64 << 10}[src.intn(3)]
	cfg.staticCap = []int{-1, 0, 32 << 10}[src.intn(3)]
	if faults == faultsRandom {
		cfg.rate = []float64{0.02, 0.05, 0.15}[src.intn(3)]
		cfg.rateSeed = int64(src.intn(1 << 30))
		cfg.rateCode = faultCodes[src.intn(len(faultCodes))]
	}
	cfg.unmapped = src.intn(3) == 0
	return cfg
}

// coreCommands is the gopter state machine over a Backend on sim. A failure
// found when a sequence's runner is torn down (the final Close) is recorded
// in *teardown, since gopter gives Destroy no way to fail the property.
func coreCommands(faults faultMode, kinds stepKinds, foreign core.Buffer, teardown *error) commands.Commands {
	return &commands.ProtoCommands{
		NewSystemUnderTestFunc: func(st commands.State) commands.SystemUnderTest {
			coreStats.sequences.Add(1)
			r, err := newRunner(st.(*genState).cfg, foreign)
			if err != nil {
				r = &runner{broken: err}
			}
			return r
		},
		DestroySystemUnderTestFunc: func(sut commands.SystemUnderTest) {
			r := sut.(*runner)
			if r.b == nil {
				return
			}
			if r.broken != nil {
				// Already reported; release what can be released.
				r.dev.ClearFaults()
				_ = r.b.SynchronizeUploads()
				_ = r.b.Close()
				return
			}
			if err := r.closeAndCheck(); err != nil && *teardown == nil {
				*teardown = fmt.Errorf("final Close of a sequence on %v: %w\nlast calls:\n  %v", r.cfg, err, r.trace)
			}
		},
		InitialStateGen: func(p *gopter.GenParameters) *gopter.GenResult {
			return gopter.NewGenResult(&genState{cfg: drawConfig(randEntropy{p.Rng}, faults)}, gopter.NoShrinker)
		},
		GenCommandFunc: func(st commands.State) gopter.Gen {
			return func(p *gopter.GenParameters) *gopter.GenResult {
				return gopter.NewGenResult(stepCommand{drawStep(randEntropy{p.Rng}, kinds)}, gopter.NoShrinker)
			}
		},
	}
}

// propSize is how many sequences a property runs and how long they get.
type propSize struct{ sequences, maxSteps int }

// runCoreProperty runs the state machine with the given faults and reports
// the seed and the reproducing command on failure.
func runCoreProperty(t *testing.T, faults faultMode, kinds stepKinds, ci, long propSize) {
	seed := coreSeed(t)
	size := ci
	if coreLong() {
		size = long
	}
	fs, err := newForeign()
	require.NoError(t, err)
	stats := snapshotCoreStats()
	var teardown error
	params := gopter.DefaultTestParametersWithSeed(seed)
	params.MinSuccessfulTests = size.sequences
	params.MaxSize = size.maxSteps
	params.MaxShrinkCount = 200
	props := gopter.NewProperties(params)
	props.Property("core.Backend agrees with the model", commands.Prop(coreCommands(faults, kinds, fs.h, &teardown)))
	props.TestingRun(t)
	require.NoError(t, teardown)
	require.NoError(t, fs.close())
	logCoreStats(t, stats)
}

// TestCoreStateMachine runs random command sequences against a Backend on
// the simulated device and the model, without faults.
func TestCoreStateMachine(t *testing.T) {
	runCoreProperty(t, faultsOff, allKinds, propSize{80, 60}, propSize{3000, 200})
}
