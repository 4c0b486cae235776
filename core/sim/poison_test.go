package sim_test

import (
	"bytes"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// A pinned block a Backend cached is poisoned and refused to asynchronous
// copies, at enqueue and when an earlier-queued copy executes, until reused.
func TestPoisonCacheHostBlocks(t *testing.T) {
	dev := sim.New(sim.Config{PoisonCache: true})
	dptr, err := dev.MemAlloc(64)
	require.NoError(t, err)
	buf, err := dev.HostAlloc(64)
	require.NoError(t, err)
	s, err := dev.StreamCreate()
	require.NoError(t, err)

	// Queued while usable, cached before it runs: refused when it executes.
	require.NoError(t, dev.MemcpyDtoHAsync(buf, dptr, s))
	dev.HostCached(buf)
	err = dev.StreamSynchronize(s)
	require.ErrorIs(t, err, cudaapi.CUDA_ERROR_ILLEGAL_ADDRESS)
	assert.Contains(t, err.Error(), "staging cache")
	assert.Equal(t, bytes.Repeat([]byte{sim.PoisonByte}, 64), buf, "cached memory is poisoned")

	s2, err := dev.StreamCreate()
	require.NoError(t, err)
	require.ErrorIs(t, dev.MemcpyHtoDAsync(dptr, buf[8:16], s2), cudaapi.CUDA_ERROR_ILLEGAL_ADDRESS, "refused at enqueue")
	dev.HostReused(buf)
	require.NoError(t, dev.MemcpyHtoDAsync(dptr, buf, s2))
	require.NoError(t, dev.StreamSynchronize(s2))

	require.NoError(t, dev.StreamDestroy(s2))
	require.NoError(t, dev.HostFree(unsafe.Pointer(&buf[0])))
	require.NoError(t, dev.MemFree(dptr))
	// s failed its synchronization; its work was dropped with the failure.
	require.NoError(t, dev.StreamDestroy(s))
	assert.True(t, dev.Live().Zero())
}

// Without the option the notifications change nothing.
func TestPoisonCacheOffIgnoresNotifications(t *testing.T) {
	dev := sim.New(sim.Config{})
	dptr, err := dev.MemAlloc(16)
	require.NoError(t, err)
	require.NoError(t, dev.WriteDevice(dptr, []byte{1, 2, 3}))
	dev.MemCached(dptr, 16)
	assert.False(t, dev.Poisoned(dptr))
	got, err := dev.ReadDevice(dptr, 3)
	require.NoError(t, err)
	assert.Equal(t, []byte{1, 2, 3}, got)
	require.NoError(t, dev.MemFree(dptr))
	assert.True(t, dev.Live().Zero())
}
