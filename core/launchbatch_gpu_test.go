//go:build gpu

package core_test

import (
	"errors"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/kernels"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// TestGPUDispatchLaunchBatchMatchesPerLaunch runs W5's 100 dependent steps
// through the real driver's LaunchBatch and through one Launch per step.
func TestGPUDispatchLaunchBatchMatchesPerLaunch(t *testing.T) {
	raw, err := core.NewCUDADriver(0)
	require.NoError(t, err)
	_, ok := raw.(core.BatchLauncher)
	assert.True(t, ok, "the CUDA driver launches batches")
	batched, err := core.Open(raw) // closes raw
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, batched.Close()) })
	perLaunch, err := core.Open(gpuDriver(t)) // hides LaunchBatch
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, perLaunch.Close()) })

	const steps, n = 100, 64
	run := func(b *core.Backend) [][]byte {
		ones := make([]uint32, n)
		for i := range ones {
			ones[i] = 1
		}
		p := residentWith(t, b, u32s(make([]uint32, n)...))
		q := residentWith(t, b, u32s(make([]uint32, n)...))
		one := residentWith(t, b, u32s(ones...))
		b.ResetTelemetry()
		out, err := b.Run(core.Batch{Steps: pingPong(p, q, one, steps),
			Reads: []core.Range{{Buf: p, Len: 4 * n}, {Buf: q, Len: 4 * n}}}, nil)
		require.NoError(t, err)
		assert.Equal(t, uint64(steps), b.Telemetry().KernelLaunches)
		for _, h := range []core.Buffer{p, q, one} {
			require.NoError(t, b.Free(h))
		}
		return out
	}
	got, want := run(batched), run(perLaunch)
	assert.Equal(t, want, got)
	assert.Equal(t, uint32(steps), words(got[0])[n-1])
	assert.Equal(t, uint32(steps-1), words(got[1])[0])
}

// TestGPUDispatchLaunchBatchStopsAtFailure queues three fills whose middle
// one has an impossible block size: the first runs, the driver's result for
// the second comes back with its index, and the third is never queued.
func TestGPUDispatchLaunchBatchStopsAtFailure(t *testing.T) {
	drv := gpuDriver(t)
	raw, err := core.NewCUDADriver(0)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, raw.(interface{ Close() error }).Close()) })
	bl := raw.(core.BatchLauncher)

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
	fill := func(i int, block uint32) core.Launch {
		return core.Launch{F: fn, Cfg: core.LaunchConfig{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{block, 1, 1}},
			Args: []core.KernelArg{{Ptr: ptrs[i], IsPtr: true}, {U32: nWords}, {U32: uint32(0xA0 + i)}}}
	}
	at, err := bl.LaunchBatch(s, []core.Launch{fill(0, 128), fill(1, 1<<20), fill(2, 128)})
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

// BenchmarkGPUW5PerLaunch is BenchmarkGPUW5DependentLaunches over a driver
// that hides LaunchBatch, so one run compares the batched path against one
// Launch per step.
func BenchmarkGPUW5PerLaunch(b *testing.B) {
	drv, err := core.NewCUDADriver(0)
	if err != nil {
		b.Fatal(err)
	}
	be, err := core.Open(struct{ core.Driver }{drv})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := be.Close(); err != nil {
			b.Error(err)
		}
		if err := drv.(interface{ Close() error }).Close(); err != nil {
			b.Error(err)
		}
	}()
	benchW5(b, be)
}
