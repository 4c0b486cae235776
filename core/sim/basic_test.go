package sim

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

func TestRoundTripThroughPinnedStaging(t *testing.T) {
	d := New(Config{TotalMemory: 1 << 20})
	p := mustAlloc(t, d, 4096)
	stage := mustPinned(t, d, 4096)
	s := mustStream(t, d)
	copy(stage, fill(4096, 7))
	require.NoError(t, d.MemcpyHtoDAsync(p, stage, s))
	got := mustPinned(t, d, 4096)
	require.NoError(t, d.MemcpyDtoHAsync(got, p, s))
	require.NoError(t, d.StreamSynchronize(s))
	require.Equal(t, fill(4096, 7), got)

	require.NoError(t, d.StreamDestroy(s))
	require.NoError(t, d.HostFree(ptrOf(stage)))
	require.NoError(t, d.HostFree(ptrOf(got)))
	require.NoError(t, d.MemFree(p))
	require.True(t, RequireNoLeaks(t, d))
}

func TestMemAllocOutOfMemory(t *testing.T) {
	d := New(Config{TotalMemory: 1000})
	p := mustAlloc(t, d, 600)
	_, err := d.MemAlloc(401)
	requireCode(t, cudaapi.CUDA_ERROR_OUT_OF_MEMORY, err)
	free, total, err := d.MemGetInfo()
	require.NoError(t, err)
	require.Equal(t, uint64(400), free)
	require.Equal(t, uint64(1000), total)
	require.NoError(t, d.MemFree(p))
	requireCode(t, cudaapi.CUDA_ERROR_INVALID_VALUE, d.MemFree(p))
}
