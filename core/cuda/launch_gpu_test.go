//go:build gpu

package cuda_test

import (
	"encoding/binary"
	"errors"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/kernels"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// TestGPULaunchBatchStopsAtFailure queues three fills whose middle
// one has an impossible block size: the first runs, the driver's result for
// the second comes back with its index, and the third is never queued.
func TestGPULaunchBatchStopsAtFailure(t *testing.T) {
	drv := openDriver(t)
	var bl driver.BatchLauncher = openDriver(t)

	const nWords = 256
	mod, err := drv.ModuleLoad(kernels.FillPTX)
	require.NoError(t, err)
	defer func() { assert.NoError(t, drv.ModuleUnload(mod)) }()
	fn, err := drv.ModuleFunction(mod, kernels.FillEntry)
	require.NoError(t, err)
	s, err := drv.StreamCreate()
	require.NoError(t, err)
	defer func() { assert.NoError(t, drv.StreamDestroy(s)) }()
	ptrs := make([]uint64, 3)
	for i := range ptrs {
		ptrs[i], err = drv.MemAlloc(4 * nWords)
		require.NoError(t, err)
		defer func(p uint64) { assert.NoError(t, drv.MemFree(p)) }(ptrs[i])
		require.NoError(t, drv.MemsetD8Async(ptrs[i], 0, 4*nWords, s))
	}
	fill := func(i int, block uint32) driver.Launch {
		return driver.Launch{F: fn, Cfg: driver.LaunchConfig{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{block, 1, 1}},
			Args: []driver.KernelArg{{Ptr: ptrs[i], IsPtr: true}, {U32: nWords}, {U32: uint32(0xA0 + i)}}}
	}
	at, err := bl.LaunchBatch(s, []driver.Launch{fill(0, 128), fill(1, 1<<20), fill(2, 128)})
	assert.Equal(t, 1, at, "the second launch failed")
	var r cudaapi.Result
	require.True(t, errors.As(err, &r), "a driver result in %v", err)
	assert.NotEqual(t, cudaapi.CUDA_SUCCESS, r)
	assert.Contains(t, err.Error(), "launch 1 of 3")
	require.NoError(t, drv.StreamSynchronize(s))

	read := func(i int) []uint32 {
		host, err := drv.HostAlloc(4 * nWords)
		require.NoError(t, err)
		defer func() { assert.NoError(t, drv.HostFree(unsafe.Pointer(&host[0]))) }()
		require.NoError(t, drv.MemcpyDtoHAsync(host, ptrs[i], s))
		require.NoError(t, drv.StreamSynchronize(s))
		return words(host)
	}
	for i, w := range []uint32{0xA0, 0, 0} {
		got := read(i)
		assert.Equal(t, w, got[0], "buffer %d", i)
		assert.Equal(t, w, got[nWords-1], "buffer %d", i)
	}
}

// words reads b as little-endian 32-bit words.
func words(b []byte) []uint32 {
	w := make([]uint32, len(b)/4)
	for i := range w {
		w[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return w
}
