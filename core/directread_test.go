package core_test

import (
	"errors"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// failDirectRead runs a direct readback of h into p whose fence and drain
// both fail, leaving the copy queued on a quarantined stream.
func failDirectRead(t *testing.T, b *core.Backend, dev *sim.Device, h core.Buffer, p *core.PinnedBuffer) {
	t.Helper()
	dev.FailNth(sim.OpStreamSynchronize, 1, cudaapi.CUDA_ERROR_UNKNOWN)
	dev.FailNth(sim.OpStreamSynchronize, 2, cudaapi.CUDA_ERROR_UNKNOWN)
	out, err := b.Download(h.All(), p.Bytes()[:0])
	require.ErrorIs(t, err, core.ErrDriver)
	assert.Len(t, out, 0, "dst is returned unchanged")
	require.Equal(t, 1, b.LaunchResourceCounts().Quarantined)
}

// TestDirectReadbackMayWriteAfterItFailed: as documented, a direct
// readback whose stream could not be drained may still write the caller's
// pinned memory after the call returned, until the quarantine synchronizes
// the stream; the memory stays pinned until then.
func TestDirectReadbackMayWriteAfterItFailed(t *testing.T) {
	dev, b, hs, init := quarantineSetup(t, nil)
	p, err := b.AllocHostPinned(qLen)
	require.NoError(t, err)
	marker := randomBytes(rand.New(rand.NewSource(9)), qLen)
	copy(p.Bytes(), marker)

	failDirectRead(t, b, dev, hs[0], p)
	assert.Equal(t, marker, p.Bytes(), "on the simulated device nothing ran before the call returned")
	dev.FailRate(1, 1, sim.OpStreamSynchronize)
	assert.ErrorIs(t, p.Free(), core.ErrInFlight, "the memory stays pinned while the copy may write it")
	dev.ClearFaults()

	// Any later call that leases a stream retries the quarantine: the copy
	// lands in p's memory then, long after the failed call returned.
	_, err = b.Download(hs[1].All(), nil)
	require.NoError(t, err)
	assert.Zero(t, b.LaunchResourceCounts().Quarantined)
	assert.Equal(t, init[0], p.Bytes(), "the quarantined copy wrote the caller's memory after the call failed")
	require.NoError(t, p.Free())
	require.NoError(t, b.Close())
	sim.RequireNoLeaks(t, dev)
}

// TestCloseLeavesMemoryAStuckDirectCopyMayWritePinned: when the stream of a
// failed direct readback never synchronizes, Close does not free the
// caller's pinned memory the copy may still write: it leaves it pinned and
// says so.
func TestCloseLeavesMemoryAStuckDirectCopyMayWritePinned(t *testing.T) {
	dev, b, hs, _ := quarantineSetup(t, nil)
	p, err := b.AllocHostPinned(qLen)
	require.NoError(t, err)
	failDirectRead(t, b, dev, hs[0], p)
	dev.FailRate(1, 1, sim.OpStreamSynchronize)

	err = b.Close()
	require.ErrorIs(t, err, core.ErrDriver)
	var ce *core.Error
	require.True(t, errors.As(err, &ce))
	assert.Contains(t, ce.Detail, "1 caller-pinned host range(s)")
	assert.Equal(t, 1, dev.Live().PinnedBuffers, "the pinned memory the copy may write is not freed")
	assert.Nil(t, p.Bytes(), "the Backend no longer hands it out")
	assert.ErrorIs(t, b.Close(), core.ErrClosed)
}

// TestFreeOfPinnedMemoryRetriesTheQuarantine: once the device recovers,
// PinnedBuffer.Free of memory a failed direct readback held succeeds by
// itself (it retries the quarantined stream), with no other call needed.
func TestFreeOfPinnedMemoryRetriesTheQuarantine(t *testing.T) {
	dev, b, hs, _ := quarantineSetup(t, nil)
	p, err := b.AllocHostPinned(qLen)
	require.NoError(t, err)
	failDirectRead(t, b, dev, hs[0], p)
	dev.FailNth(sim.OpStreamSynchronize, 1, cudaapi.CUDA_ERROR_UNKNOWN)
	requireErrKind(t, p.Free(), core.ErrInFlight, "could not be synchronized")
	require.NoError(t, p.Free(), "the device recovered: Free's own retry releases the quarantine")
	assert.Zero(t, b.LaunchResourceCounts().Quarantined)
	require.NoError(t, b.Close())
	sim.RequireNoLeaks(t, dev)
}
