package proptest

// Checks for bugs that once died to a single unit test each: a second,
// independent way to catch each of them.

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// staticSplitStep acquires two static sets of the same bytes split apart
// differently ([6 7] then [8 9] of staticCatalog) in one domain: the
// second must not be served the first's buffers (the cache key covers
// every payload's length, not only the bytes).
type staticSplitStep struct {
	withFault
	domain uint64
	flip   bool
}

func (s *staticSplitStep) setFault(f *faultSpec) { s.f = f }
func (s *staticSplitStep) String() string {
	return fmt.Sprintf("staticSplit(domain=%d flip=%v)%s", s.domain, s.flip, s.faultString())
}

func (s *staticSplitStep) run(r *runner) error {
	a, b := []int{6, 7}, []int{8, 9}
	if s.flip {
		a, b = b, a
	}
	if err := (&staticAcquireStep{withFault: s.withFault, domain: s.domain, payload: a}).run(r); err != nil {
		return err
	}
	// Only the first acquisition carries the fault; the second is judged
	// from a fresh start of the step's call counts, and of the quarantine:
	// when the first failed and its drain failed too, the second's lease
	// retries that quarantine first, as every lease acquisition does, and
	// those retries are not its upload's calls.
	if r.armed != nil {
		r.armed = nil
		r.dev.ClearFaults()
	}
	if !r.cfg.shared {
		r.callsBefore = r.dev.CallCounts()
		r.q.start = r.b.LaunchResourceCounts().Quarantined
	}
	return (&staticAcquireStep{domain: s.domain, payload: b}).run(r)
}

// TestStaticCacheExactFit: a static set whose bytes are exactly the cache's
// cap is cached (and hit when acquired again), one byte more is not; a set
// of exactly the cap evicts an unreferenced cached set to fit.
func TestStaticCacheExactFit(t *testing.T) {
	rng := rand.New(rand.NewSource(coreSeed(t)))
	for range 20 {
		capBytes := 1 + rng.Intn(64<<10)
		dev := sim.New(sim.Config{TotalMemory: 64 << 20})
		b, err := core.Open(dev)
		require.NoError(t, err)
		d, err := core.NewOptimizerDispatcher(b, core.WithStaticCacheCap(uint64(capBytes)))
		require.NoError(t, err)
		split := rng.Intn(capBytes)
		payloads := [][]byte{patternData(1, split), patternData(2, capBytes-split)}
		if split == 0 {
			payloads = payloads[1:]
		}
		set, err := d.AcquireStaticUploads(1, payloads)
		require.NoError(t, err)
		assert.True(t, set.Cached, "a set of exactly the cap (%d bytes) must be cached", capBytes)
		require.NoError(t, d.ReleaseStaticUploads(set))
		again, err := d.AcquireStaticUploads(1, payloads)
		require.NoError(t, err)
		assert.True(t, again.CacheHit, "the cached exact-fit set must be hit")
		require.NoError(t, d.ReleaseStaticUploads(again))

		other, err := d.AcquireStaticUploads(2, [][]byte{patternData(3, capBytes)})
		require.NoError(t, err)
		assert.True(t, other.Cached, "an exact-fit set must evict the unreferenced cached one to fit")
		require.NoError(t, d.ReleaseStaticUploads(other))
		over, err := d.AcquireStaticUploads(3, [][]byte{patternData(4, capBytes+1)})
		require.NoError(t, err)
		assert.False(t, over.Cached, "a set one byte over the cap is not cached")
		require.NoError(t, d.ReleaseStaticUploads(over))
		require.NoError(t, d.Close())
		require.NoError(t, b.Close())
		require.True(t, dev.Live().Zero(), "live after Close: %s", dev.Live())
	}
}

// TestStaticSplitAfterQuarantine replays a sequence the long random-fault
// run shrank to: in the last step the first acquisition's fence and drain
// fail (random faults on StreamSynchronize), leaving a quarantine; the
// second acquisition's lease retries it before its own fence. The model
// must count that retry as the quarantine's, not the upload's.
func TestStaticSplitAfterQuarantine(t *testing.T) {
	cfg := runConfig{total: 48 << 20, devicePoolCap: 256 << 20, pinnedPoolCap: 1 << 20, poolLimit: 64 << 10,
		optPoolCap: -1, staticCap: 32 << 10, faults: faultsRandom, rate: 0.15, rateSeed: 859917874,
		rateCode: cudaapi.CUDA_ERROR_LAUNCH_FAILED}
	r, err := newRunner(cfg, core.Buffer{})
	require.NoError(t, err)
	steps := []step{
		&closeStep{try: true},
		&staticAcquireStep{domain: 0, payload: []int{1, 7, 1}},
		&staticSplitStep{domain: 1},
		&allocStep{size: 514458},
		&allocStep{size: 40751, rel: 2},
	}
	for _, s := range steps {
		require.NoError(t, r.do(s))
	}
	require.Zero(t, r.b.LaunchResourceCounts().Quarantined, "the sequence must reach the last step without a quarantine")
	last := &staticSplitStep{domain: 0}
	syncsBefore := r.dev.CallCounts()[sim.OpStreamSynchronize]
	require.NoError(t, r.do(last))
	// The case is only this regression while the seed still produces it:
	// the first acquisition quarantined, the second's lease retried.
	require.Greater(t, r.dev.CallCounts()[sim.OpStreamSynchronize]-syncsBefore, uint64(3),
		"the random faults no longer fail the first acquisition's fence and drain")
	require.NoError(t, r.closeAndCheck())
}

// TestFreeRetriesTheQuarantine: when a failed call's drain failed
// too, the quarantine holds its buffers in flight; once the device
// synchronizes again (faults cleared), Free of such a buffer must
// retry the quarantine and free it, not report it in flight. Each case fails
// a different call the same way.
func TestFreeRetriesTheQuarantine(t *testing.T) {
	for _, tc := range []struct {
		name string
		call func(*core.Backend, core.Buffer) error
	}{
		{"upload", func(b *core.Backend, h core.Buffer) error {
			return b.Upload(core.UploadAt{Buf: h, Data: make([]byte, h.Len)})
		}},
		{"readback", func(b *core.Backend, h core.Buffer) error { _, err := b.Download(h.All(), nil); return err }},
		{"Run", func(b *core.Backend, h core.Buffer) error {
			_, err := b.Run(core.Batch{Fills: []core.Fill{{Buf: h, Value: 3}}, Reads: []core.Range{{Buf: h, Len: h.Len}}}, nil)
			return err
		}},
		{"dispatch", func(b *core.Backend, h core.Buffer) error {
			return b.Dispatch(core.ProgramFillU32(), []core.Buffer{h}, core.DispatchConfig{Scalars: []uint32{1}})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev := sim.New(sim.Config{TotalMemory: 32 << 20})
			b, err := core.Open(dev)
			require.NoError(t, err)
			h, err := b.Alloc(256)
			require.NoError(t, err)
			// Every synchronization fails: the fence, the drain, and any
			// retry during the call.
			dev.FailRateWith(1, 1, cudaapi.CUDA_ERROR_LAUNCH_FAILED, sim.OpStreamSynchronize, sim.OpEventSynchronize)
			require.ErrorIs(t, tc.call(b, h), core.ErrDriver)
			dev.ClearFaults()
			if b.LaunchResourceCounts().Quarantined == 0 {
				t.Skip("the failure left no quarantine")
			}
			require.NoError(t, b.Free(h), "Free once the quarantine can drain")
			assert.Zero(t, b.LaunchResourceCounts().Quarantined)
			require.NoError(t, b.Close())
			assert.True(t, dev.Live().Zero(), "live after Close: %s", dev.Live())
		})
	}
}
