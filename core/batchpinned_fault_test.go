package core_test

// Failures of batches that move memory pinned through the Backend by DMA
// directly (Batch doc): a failed batch leaks nothing, keeps the pinned
// memory its queued copies may still touch in flight while their stream
// cannot be drained, and lets it go once the stream synchronizes.

import (
	"testing"

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
