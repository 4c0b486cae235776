package proptest

import (
	"math/rand"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// TestCoreConcurrent runs random command sequences from several goroutines
// on one Backend (run it under -race). Each goroutine owns its buffers and a
// model of them, and checks every read of its own buffers byte for byte as
// it goes; allocations may fail for lack of budget at any time, since the
// others allocate too. Every goroutine dispatches kernels over its own
// buffers and awaits them; only goroutine 0 uses pinned memory and
// asynchronous uploads, because SynchronizeUploads completes every
// goroutine's queued uploads at once. Afterwards MemoryStats().Allocated equals the sum of the
// goroutines' surviving buffers, the telemetry equals the sum of what each
// goroutine's successful calls moved (the counters are exact sums, so the
// interleaving does not matter), and Close leaves the device empty.
func TestCoreConcurrent(t *testing.T) {
	seed := coreSeed(t)
	rounds, steps := 4, 80
	if coreLong() {
		rounds, steps = 60, 400
	}
	const workers = 4
	fs, err := newForeign()
	require.NoError(t, err)
	stats := snapshotCoreStats()
	for round := range rounds {
		rng := rand.New(rand.NewSource(seed + int64(round)))
		cfg := drawConfig(randEntropy{rng}, faultsOff)
		dev := cfg.device()
		log := new(logCounter)
		b, err := core.Open(dev, cfg.options(log)...)
		require.NoError(t, err)
		coreStats.sequences.Add(workers)

		runners := make([]*runner, workers)
		var wg sync.WaitGroup
		for w := range runners {
			r := newSharedRunner(cfg, dev, b, log, fs.h)
			runners[w] = r
			src := randEntropy{rand.New(rand.NewSource(seed*1000 + int64(round*workers+w)))}
			kinds := stepKinds{async: w == 0}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range steps {
					if r.do(drawStep(src, kinds)) != nil {
						return
					}
				}
			}()
		}
		wg.Wait()
		for w, r := range runners {
			require.NoError(t, r.broken, "round %d (config %v) goroutine %d", round, cfg, w)
		}

		checkConcurrentRound(t, b, runners, round)
		require.NoError(t, b.Close(), "round %d", round)
		require.NoError(t, log.check(), "round %d", round)
		require.True(t, sim.RequireNoLeaks(t, dev), "round %d (config %v)", round, cfg)
	}
	require.NoError(t, fs.close())
	logCoreStats(t, stats)
}

// checkConcurrentRound settles every runner's queued work, audits each
// surviving buffer, and checks the Backend's resident bytes and telemetry
// against the sum of what the runners' models recorded.
func checkConcurrentRound(t *testing.T, b *core.Backend, runners []*runner, round int) {
	// Wait for queued dispatches and uploads, as any caller must before
	// Close.
	for _, r := range runners {
		require.NoError(t, r.settleAll(), "round %d", round)
	}
	var resident, packable, stageable uint64
	var want core.Telemetry
	for _, r := range runners {
		resident += r.m.residentBytes()
		for id := range r.m.bufs {
			require.NoError(t, r.audit(id), "round %d", round)
		}
		packable += r.m.packable
		stageable += r.m.stageable
		addConcurrentTelemetry(&want, r.m.tel)
	}
	assert.Equal(t, resident, b.MemoryStats().Allocated, "round %d: resident bytes vs surviving buffers", round)
	// A wide transfer may be packed (one launch, fewer copies) or not,
	// whichever way the interleaving let core's tuning decide; those two
	// counters are bounded, every other one is exact.
	got := b.Telemetry()
	assert.LessOrEqual(t, got.PackedLaunches, packable, "round %d: packed launches", round)
	if stageable == 0 {
		assert.LessOrEqual(t, got.DeviceCopies, want.DeviceCopies, "round %d: device copies", round)
	} else {
		// Staged transfers add DMAs and waits the runners cannot see.
		assert.GreaterOrEqual(t, got.SyncPoints, want.SyncPoints, "round %d: sync points", round)
		got.SyncPoints, want.SyncPoints = 0, 0
	}
	if got.PackedLaunches == 0 && stageable == 0 {
		assert.Equal(t, want.DeviceCopies, got.DeviceCopies, "round %d: device copies without packing", round)
	}
	got.PackedLaunches, got.DeviceCopies, want.DeviceCopies = 0, 0, 0
	assert.Equal(t, want, got, "round %d: telemetry vs the sum of every goroutine's calls", round)
}

// addConcurrentTelemetry adds one runner's telemetry counters to want: all
// but PackedLaunches, which the round bounds instead, and Collectives, which
// the round expects to stay zero.
func addConcurrentTelemetry(want *core.Telemetry, tel core.Telemetry) {
	want.HostToDeviceBytes += tel.HostToDeviceBytes
	want.DeviceToHostBytes += tel.DeviceToHostBytes
	want.UploadOps += tel.UploadOps
	want.ReadbackOps += tel.ReadbackOps
	want.SyncPoints += tel.SyncPoints
	want.ResidentAllocationBytes += tel.ResidentAllocationBytes
	want.DeviceCopies += tel.DeviceCopies
	want.RequestedCopies += tel.RequestedCopies
	want.MemsetOps += tel.MemsetOps
	want.KernelLaunches += tel.KernelLaunches
}
