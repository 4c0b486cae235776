package proptest

// Faults on releases: MemFree (Free, pool and dispatcher
// evictions, Close), HostFree, StreamDestroy, EventDestroy and
// ModuleUnload, with codes other than CUDA_ERROR_UNKNOWN. A release that
// fails inside a call with nothing to report it to is logged and leaks the
// object; it must never corrupt data or accounting, and Close must still
// release everything else. Close itself returns the first release failure
// it met; a Close that failed to free memory keeps it counted, and the next
// Close (faults gone) frees it.

import (
	"errors"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

var releaseOps = []sim.Op{sim.OpMemFree, sim.OpHostFree, sim.OpStreamDestroy, sim.OpEventDestroy, sim.OpModuleUnload, sim.OpHostUnregister}

// faultCodes are the failure codes drawn for injected faults besides
// CUDA_ERROR_UNKNOWN.
var faultCodes = []cudaapi.Result{cudaapi.CUDA_ERROR_UNKNOWN, cudaapi.CUDA_ERROR_LAUNCH_FAILED,
	cudaapi.CUDA_ERROR_ILLEGAL_ADDRESS, cudaapi.CUDA_ERROR_INVALID_VALUE, cudaapi.CUDA_ERROR_OUT_OF_MEMORY}

// leaked counts the objects a device still holds.
func leaked(l sim.Live) int {
	return l.Allocations + l.PinnedBuffers + l.RegisteredRanges + l.Streams + l.Events + l.Modules
}

// TestCoreReleaseFaults runs random sequences while releases fail at a
// random rate with a drawn code, then checks every buffer's bytes, closes
// with one more release fault armed, and bounds what is left on the device:
// at most one object per logged failure plus the one Close reports.
func TestCoreReleaseFaults(t *testing.T) {
	seed := coreSeed(t)
	rounds, steps := 4, 60
	if coreLong() {
		rounds, steps = 200, 150
	}
	fs, err := newForeign()
	require.NoError(t, err)
	stats := snapshotCoreStats()
	for round := range rounds {
		rng := rand.New(rand.NewSource(seed + int64(round)))
		src := randEntropy{rng}
		cfg := drawConfig(src, faultsOff)
		// Small caches, so that frees and evictions release often.
		cfg.devicePoolCap = []uint64{0, 64 << 10}[rng.Intn(2)]
		cfg.pinnedPoolCap = []uint64{0, 64 << 10}[rng.Intn(2)]
		cfg.optPoolCap, cfg.staticCap = []int{0, 4096}[rng.Intn(2)], []int{0, 4096}[rng.Intn(2)]
		dev := cfg.device()
		log := new(logCounter)
		b, err := core.Open(dev, cfg.options(log)...)
		require.NoError(t, err)
		coreStats.sequences.Add(1)
		// Shared mode: the model checks bytes and errors, not the device's
		// object counts, which leaked releases change.
		r := newSharedRunner(cfg, dev, b, log, fs.h)
		r.cfg.faults = faultsRandom // calls that release (Free, UnpinHostBuffer) may report the failure
		code := faultCodes[rng.Intn(len(faultCodes))]
		dev.FailRateWith(seed+int64(round), []float64{0.1, 0.3, 0.6}[rng.Intn(3)], code, releaseOps...)
		kinds := allKinds
		// Capture's checks read the step's device calls, which shared
		// mode does not track.
		kinds.close, kinds.graphs = false, false
		for range steps {
			if r.do(drawStep(src, kinds)) != nil {
				break
			}
		}
		require.NoError(t, r.broken, "round %d (config %v, code %d)", round, cfg, code)
		dev.ClearFaults()
		require.NoError(t, r.settleAll(), "round %d", round)
		for id := range r.m.bufs {
			require.NoError(t, r.audit(id), "round %d", round)
		}
		if r.opt != nil {
			require.NoError(t, r.opt.d.Close(), "round %d: OptimizerDispatcher.Close", round)
		}
		var releases uint64
		for _, op := range releaseOps {
			releases += dev.Calls(op)
		}
		t.Logf("round %d: %d releases during the sequence, %d failures logged", round, releases, log.n.Load())
		closeWithReleaseFault(t, round, b, dev, log, releaseOps[rng.Intn(len(releaseOps))], code)
	}
	require.NoError(t, fs.close())
	logCoreStats(t, stats)
}

// closeWithReleaseFault closes b with the first call of op failing with
// code and bounds what is left on the device by the failures reported.
func closeWithReleaseFault(t *testing.T, round int, b *core.Backend, dev *sim.Device, log *logCounter, op sim.Op, code cudaapi.Result) {
	logged := int(log.n.Load())
	before := dev.Calls(op)
	dev.FailNth(op, 1, code)
	err := b.Close()
	fired := dev.Calls(op) > before
	dev.ClearFaults()
	closeErrs := 0
	switch {
	case fired && err == nil:
		// A failure Close swallowed must at least be logged.
		require.Greater(t, int(log.n.Load()), logged, "round %d: a failed %v during Close was neither returned nor logged", round, op)
	case err != nil:
		var e *core.Error
		require.True(t, errors.As(err, &e) && errors.Is(err, core.ErrDriver), "round %d: Close: %v", round, err)
		require.Equal(t, code, e.Code, "round %d: Close: %v", round, err)
		require.Equal(t, "Close", e.Op, "round %d: Close's error names another call: %v", round, err)
		require.NotEmpty(t, e.Fix, "round %d: Close: %v", round, err)
		closeErrs = 1
	}
	// Memory a free failed on stays counted; a second Close, with the
	// faults gone, frees it, and a third finds nothing left.
	memFault := op == sim.OpMemFree || op == sim.OpHostFree || op == sim.OpHostUnregister
	if err2 := b.Close(); err != nil && memFault {
		require.NoError(t, err2, "round %d: a second Close retries the free of %v that failed", round, op)
	} else {
		require.ErrorIs(t, err2, core.ErrClosed, "round %d: second Close after %v", round, err)
	}
	require.ErrorIs(t, b.Close(), core.ErrClosed, "round %d: Close with nothing left", round)
	ms := b.MemoryStats()
	require.Zero(t, ms.Allocated+ms.Reserved+ms.ReservedPinned, "round %d: memory still counted after the retry: %+v", round, ms)
	l := dev.Live()
	t.Logf("round %d: %d release failures logged, Close with %v failing: %v; left %s", round, log.n.Load(), op, err, l)
	require.Zero(t, l.QueuedOps, "round %d: work still queued after Close: %s", round, l)
	require.LessOrEqual(t, leaked(l), int(log.n.Load())+closeErrs,
		"round %d (%v failed with %d; %d failures logged, Close returned %v): more left on the device than failed releases explain: %s",
		round, op, code, log.n.Load(), err, l)
}
