package core_test

// Failures of batches that move memory pinned through the Backend by DMA
// directly (Batch doc): a failed batch leaks nothing, keeps the pinned
// memory its queued copies may still touch in flight while their stream
// cannot be drained, and lets it go once the stream synchronizes.

import (
	"bytes"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// pinnedBatchCall is one way to run a batch whose only copy is a direct
// DMA from or into p (of qLen bytes) on h.
type pinnedBatchCall struct {
	name string
	call func(b *core.Backend, h core.Buffer, p *core.PinnedBuffer) error
}

func pinnedBatchCalls() []pinnedBatchCall {
	async := func(batch core.Batch, b *core.Backend) error {
		pd, err := b.RunAsync(batch)
		if err != nil {
			return err
		}
		_, err = pd.AwaitInto(nil)
		return err
	}
	return []pinnedBatchCall{
		{"Run upload", func(b *core.Backend, h core.Buffer, p *core.PinnedBuffer) error {
			_, err := b.Run(core.Batch{Uploads: []core.UploadAt{{Buf: h, Data: p.Bytes()[:qLen]}}}, nil)
			return err
		}},
		{"Run read into a pinned slot", func(b *core.Backend, h core.Buffer, p *core.PinnedBuffer) error {
			_, err := b.Run(core.Batch{Reads: []core.Range{h.All()}}, [][]byte{p.Bytes()[:0]})
			return err
		}},
		{"RunAsync upload", func(b *core.Backend, h core.Buffer, p *core.PinnedBuffer) error {
			return async(core.Batch{Uploads: []core.UploadAt{{Buf: h, Data: p.Bytes()[:qLen]}}}, b)
		}},
		{"RunAsync read Into", func(b *core.Backend, h core.Buffer, p *core.PinnedBuffer) error {
			return async(core.Batch{Reads: []core.Range{h.All()}, Into: [][]byte{p.Bytes()[:qLen]}}, b)
		}},
	}
}

// TestFailedPinnedBatchQuarantinesThePinnedMemory: a batch's direct copy
// is queued, the fence fails and so does the drain. The stream goes to
// the quarantine with the copy still queued, so the pinned memory the copy
// reads or writes must stay in flight (PinnedBuffer.Free refuses) until a
// synchronization of that stream succeeds; then Free succeeds and Close
// leaves nothing behind. (Pending.fail handed the batch's pinned regions
// to no one: Free succeeded at once, and the quarantined copy later ran on
// freed memory.)
func TestFailedPinnedBatchQuarantinesThePinnedMemory(t *testing.T) {
	for _, tc := range pinnedBatchCalls() {
		t.Run(tc.name, func(t *testing.T) {
			dev, b, hs, _ := quarantineSetup(t, nil)
			p, err := b.AllocHostPinned(qLen)
			require.NoError(t, err)

			dev.FailNth(sim.OpStreamSynchronize, 1, cudaapi.CUDA_ERROR_UNKNOWN)
			dev.FailNth(sim.OpStreamSynchronize, 2, cudaapi.CUDA_ERROR_UNKNOWN)
			require.ErrorIs(t, tc.call(b, hs[0], p), core.ErrDriver)
			require.Equal(t, 1, b.LaunchResourceCounts().Quarantined)
			dev.FailRate(1, 1, sim.OpStreamSynchronize)
			require.ErrorIs(t, p.Free(), core.ErrInFlight, "the quarantined DMA may still use the pinned memory")
			dev.ClearFaults()

			require.NoError(t, tc.call(b, hs[1], p), "a later call releases the quarantine")
			assert.Zero(t, b.LaunchResourceCounts().Quarantined)
			require.NoError(t, p.Free(), "the quarantine gave the pinned memory back")
			require.NoError(t, b.Close())
			sim.RequireNoLeaks(t, dev)
		})
	}
}

// TestAtomicReadbacksKeepPinnedBatchDestinations: under
// WithAtomicReadbacks a failed readback changes no byte of the caller's
// memory, a batch's read into pinned memory included. Each form fails its
// fence once; the drain after it runs the queued work, so a read moved by
// DMA straight into the pinned destination would have written it. (Batches
// took the direct path whatever the option said.) With the fault gone the
// same call lands the read in that destination.
func TestAtomicReadbacksKeepPinnedBatchDestinations(t *testing.T) {
	type call func() ([]byte, error)
	for _, tc := range []struct {
		name string
		// prepare returns the call reading h into into, and what closes
		// what it made.
		prepare func(t *testing.T, b *core.Backend, h core.Buffer, into []byte) (call, func())
	}{
		{"Run", func(t *testing.T, b *core.Backend, h core.Buffer, into []byte) (call, func()) {
			return func() ([]byte, error) {
				out, err := b.Run(core.Batch{Reads: []core.Range{h.All()}}, [][]byte{into[:0]})
				return slot0(out), err
			}, func() {}
		}},
		{"RunAsync", func(t *testing.T, b *core.Backend, h core.Buffer, into []byte) (call, func()) {
			return func() ([]byte, error) {
				pd, err := b.RunAsync(core.Batch{Reads: []core.Range{h.All()}, Into: [][]byte{into}})
				if err != nil {
					return nil, err
				}
				out, err := pd.AwaitInto(nil)
				return slot0(out), err
			}, func() {}
		}},
		{"Replay", func(t *testing.T, b *core.Backend, h core.Buffer, into []byte) (call, func()) {
			g, err := b.Capture(core.Batch{Reads: []core.Range{h.All()}, Into: [][]byte{into}})
			require.NoError(t, err)
			return func() ([]byte, error) {
				out, err := g.Replay(nil)
				return slot0(out), err
			}, func() { require.NoError(t, g.Close()) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev, b, hs, init := quarantineSetup(t, []core.Option{core.WithAtomicReadbacks(true)})
			p, err := b.AllocHostPinned(qLen)
			require.NoError(t, err)
			into := p.Bytes()[:qLen]
			for i := range into {
				into[i] = 0xa5
			}
			before := bytes.Clone(into)
			run, done := tc.prepare(t, b, hs[0], into)

			dev.FailNth(sim.OpStreamSynchronize, 1, cudaapi.CUDA_ERROR_UNKNOWN)
			_, err = run()
			require.ErrorIs(t, err, core.ErrDriver)
			assert.Zero(t, b.LaunchResourceCounts().Quarantined, "the drain succeeded and ran the work")
			assert.Equal(t, before, into, "a failed read under WithAtomicReadbacks wrote the caller's pinned memory")

			got, err := run()
			require.NoError(t, err)
			assert.Equal(t, init[0], got)
			assert.Equal(t, unsafe.SliceData(into), unsafe.SliceData(got), "the read lands in its destination")
			done()
			require.NoError(t, p.Free())
			require.NoError(t, b.Close())
			sim.RequireNoLeaks(t, dev)
		})
	}
}

// slot0 returns the first result slot, or nil.
func slot0(out [][]byte) []byte {
	if len(out) == 0 {
		return nil
	}
	return out[0]
}

// TestFailedReplayQuarantinesThePinnedMemory: a replay of a graph whose
// copies move pinned memory directly fails its fence and its drain. The
// graph is broken (it refuses to replay), its stream goes to the
// quarantine with the pinned memory the graph's copies use, which stays in
// flight while the stream cannot be synchronized; once it can, the graph
// closes, the memory is freed and nothing is left.
func TestFailedReplayQuarantinesThePinnedMemory(t *testing.T) {
	dev, b, hs, _ := quarantineSetup(t, nil)
	p, err := b.AllocHostPinned(2 * qLen)
	require.NoError(t, err)
	g, err := b.Capture(core.Batch{Uploads: []core.UploadAt{{Buf: hs[0], Data: p.Bytes()[:qLen]}},
		Reads: []core.Range{hs[1].All()}, Into: [][]byte{p.Bytes()[qLen:]}})
	require.NoError(t, err)

	dev.FailNth(sim.OpStreamSynchronize, 1, cudaapi.CUDA_ERROR_UNKNOWN)
	dev.FailNth(sim.OpStreamSynchronize, 2, cudaapi.CUDA_ERROR_UNKNOWN)
	_, err = g.Replay(nil)
	require.ErrorIs(t, err, core.ErrDriver)
	require.Equal(t, 1, b.LaunchResourceCounts().Quarantined)
	dev.FailRate(1, 1, sim.OpStreamSynchronize)
	requireErrKind(t, p.Free(), core.ErrInFlight)
	_, err = g.Replay(nil)
	requireErrKind(t, err, core.ErrDriver, "could not be drained")
	dev.ClearFaults()

	require.NoError(t, g.Close())
	require.NoError(t, p.Free(), "Free retries the quarantine, which lets the memory go")
	assert.Zero(t, b.LaunchResourceCounts().Quarantined)
	require.NoError(t, b.Close())
	sim.RequireNoLeaks(t, dev)
}
