package core_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// TestCloseKeepsWhatItCouldNotFreeAndRetries: the driver refuses to free a
// resident buffer, a pinned staging block and a caller's pinned buffer at
// Close. Close reports all three, they stay allocated and counted in
// MemoryStats, and a second Close frees exactly them; after that Close is
// ErrClosed again.
func TestCloseKeepsWhatItCouldNotFreeAndRetries(t *testing.T) {
	dev := sim.New(sim.Config{TotalMemory: testMemory})
	b, err := core.Open(dev, core.WithLogger(quietLogger), core.WithDevicePoolCap(0))
	require.NoError(t, err)
	h, err := b.Alloc(4096)
	require.NoError(t, err)
	require.NoError(t, b.Upload(core.UploadAt{Buf: h, Data: make([]byte, 4096)})) // leaves a pinned staging block cached
	p, err := b.AllocHostPinned(64)
	require.NoError(t, err)
	cachedPinned := b.MemoryStats().CachedPinned
	require.NotZero(t, cachedPinned)

	dev.FailNth(sim.OpMemFree, 1, cudaapi.CUDA_ERROR_UNKNOWN)
	dev.FailNth(sim.OpHostFree, 1, cudaapi.CUDA_ERROR_UNKNOWN) // the caller's pinned buffer
	dev.FailNth(sim.OpHostFree, 2, cudaapi.CUDA_ERROR_UNKNOWN) // the staging block
	err = b.Close()
	require.ErrorIs(t, err, core.ErrDriver)
	var ce *core.Error
	require.True(t, errors.As(err, &ce))
	assert.Equal(t, "Close", ce.Op)
	assert.Contains(t, ce.Detail, "1 resident buffer(s) (4096 bytes)")
	assert.Contains(t, ce.Detail, "1 pinned staging block(s)")
	assert.Contains(t, ce.Detail, "1 pinned host range(s) (64 bytes)")
	assert.Contains(t, ce.Fix, "call Close again")

	ms := b.MemoryStats()
	assert.Equal(t, uint64(4096), ms.Allocated, "the buffer Close could not free is still counted")
	assert.GreaterOrEqual(t, ms.Reserved, uint64(4096))
	assert.Equal(t, cachedPinned, ms.ReservedPinned, "the staging block Close could not free is still counted")
	l := dev.Live()
	assert.Equal(t, 1, l.Allocations, "%s", l)
	assert.Equal(t, 2, l.PinnedBuffers, "%s", l)
	assert.NotNil(t, p.Bytes(), "the pinned buffer is still allocated")

	require.NoError(t, b.Close(), "a second Close retries exactly the failed frees")
	ms = b.MemoryStats()
	assert.Zero(t, ms.Allocated+ms.Reserved+ms.ReservedPinned)
	assert.Nil(t, p.Bytes())
	sim.RequireNoLeaks(t, dev)
	assert.ErrorIs(t, b.Close(), core.ErrClosed, "nothing is left to retry")
}

// TestUncachedStagingFreeFailureIsKeptForTrim: with no pinned cache, a
// transfer's staging block goes back to the driver after the call; when
// that HostFree fails the block stays counted, and the next Trim frees it.
func TestUncachedStagingFreeFailureIsKeptForTrim(t *testing.T) {
	b, dev := openSim(t, sim.Config{}, core.WithPinnedPoolCap(0))
	h, err := b.Alloc(4096)
	require.NoError(t, err)
	dev.FailNth(sim.OpHostFree, 1, cudaapi.CUDA_ERROR_UNKNOWN)
	require.NoError(t, b.Upload(core.UploadAt{Buf: h, Data: make([]byte, 4096)}), "the transfer itself succeeded")
	require.Equal(t, 1, dev.Live().PinnedBuffers, "the driver kept the staging block")
	assert.NotZero(t, b.MemoryStats().ReservedPinned, "and so does the count")

	dev.FailNth(sim.OpHostFree, 1, cudaapi.CUDA_ERROR_UNKNOWN)
	requireErrKind(t, b.Trim(), core.ErrDriver, "HostFree")
	assert.NotZero(t, b.MemoryStats().ReservedPinned, "a retry that fails keeps it")
	require.NoError(t, b.Trim())
	assert.Zero(t, b.MemoryStats().ReservedPinned)
	assert.Zero(t, dev.Live().PinnedBuffers)
}

// TestGroupCloseRetriesFailedFrees: a Group whose Backend could not free
// a buffer at Close stays open for a second Close, which frees it.
func TestGroupCloseRetriesFailedFrees(t *testing.T) {
	m, err := sim.NewMachine(sim.MachineConfig{Devices: 2, Device: sim.Config{TotalMemory: 64 << 20}})
	require.NoError(t, err)
	g, err := core.OpenGroup(m.Drivers(), core.WithLogger(quietLogger), core.WithDevicePoolCap(0))
	require.NoError(t, err)
	for i := range 2 {
		_, err := g.Backends()[i].Alloc(256)
		require.NoError(t, err)
	}
	m.Device(1).FailNth(sim.OpMemFree, 1, cudaapi.CUDA_ERROR_UNKNOWN)
	requireErrKind(t, g.Close(), core.ErrDriver, "1 resident buffer(s) (256 bytes)")
	assert.Equal(t, 1, m.Device(1).Live().Allocations)
	require.NoError(t, g.Close(), "the second Close retries the failed free")
	assert.ErrorIs(t, g.Close(), core.ErrClosed)
	sim.RequireMachineNoLeaks(t, m)
}
