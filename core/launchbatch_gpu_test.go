//go:build gpu

package core_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
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
