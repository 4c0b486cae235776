//go:build gpu

// GPU conformance of the dispatch path: every built-in kernel on the device
// against its sim twin, a 100-step sequence with one fence, pending work with
// timing, and the W5 benchmark. Build with `make gpu-test-bin` (or
// CGO_ENABLED=1 go test -c -tags gpu ./core) and run on a GPU machine:
//
//	.gpu/core.test -test.run 'GPUDispatch' -test.v
//	.gpu/core.test -test.run '^$' -test.bench GPUW5 -test.benchtime 200x

package core_test

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// dispatchGPU opens a Backend on device 0, closed (and checked) at cleanup.
func dispatchGPU(t testing.TB) *core.Backend {
	t.Helper()
	b, err := core.OpenCUDA(0)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, b.Close()) })
	return b
}

// runBuiltin uploads in, dispatches p with scalars and reads every buffer back.
func runBuiltin(t *testing.T, b *core.Backend, p *core.Program, in [][]uint32, scalars []uint32) [][]uint32 {
	t.Helper()
	bufs := make([]core.Buffer, len(in))
	for i, w := range in {
		bufs[i] = residentWith(t, b, u32s(w...))
	}
	require.NoError(t, b.Dispatch(p, bufs, core.DispatchConfig{Scalars: scalars}))
	got, err := b.DownloadMany(allOf(bufs), nil)
	require.NoError(t, err)
	out := make([][]uint32, len(got))
	for i := range got {
		out[i] = words(got[i])
		require.NoError(t, b.Free(bufs[i]))
	}
	return out
}

func TestGPUDispatchBuiltinsMatchSimTwins(t *testing.T) {
	gpu := dispatchGPU(t)
	simB, _ := openSim(t, sim.Config{TotalMemory: 256 << 20})
	for _, bc := range builtinCases() {
		// Sizes around block and grid-cap boundaries; the largest needs a
		// capped grid (more than 65535 blocks of 256) to loop with its stride.
		for _, n := range []int{1, 255, 256, 257, 65536*256 + 3} {
			t.Run(fmt.Sprintf("%s/n=%d", bc.name, n), func(t *testing.T) {
				r := rand.New(rand.NewSource(int64(n) * 7919))
				in, scalars, want := bc.setup(r, n)
				onGPU := runBuiltin(t, gpu, bc.program(), in, scalars)
				onSim := runBuiltin(t, simB, bc.program(), in, scalars)
				for i := range want {
					require.Equal(t, onSim[i], onGPU[i], "buffer %d: GPU and sim twin differ", i)
					require.Equal(t, want[i], onGPU[i], "buffer %d: GPU and plain loop differ", i)
				}
			})
		}
	}
}

func TestGPUDispatchHundredStepsOneFence(t *testing.T) {
	b := dispatchGPU(t)
	o := residentWith(t, b, u32s(1, 2, 3, 4))
	c := residentWith(t, b, u32s(10, 20, 30, 40))
	steps := make([]core.Step, 100)
	for i := range steps {
		steps[i] = core.Step{Program: core.ProgramVAddU32(), Bufs: []core.Buffer{o, c, o}}
	}
	b.ResetTelemetry()
	out, err := b.Run(core.Batch{Steps: steps, Reads: []core.Range{{Buf: o, Len: 16}}}, nil)
	require.NoError(t, err)
	assert.Equal(t, []uint32{1001, 2002, 3003, 4004}, words(out[0]))
	tel := b.Telemetry()
	assert.Equal(t, uint64(1), tel.SyncPoints, "one fence")
	assert.Equal(t, uint64(100), tel.KernelLaunches)
	require.NoError(t, b.Free(o))
	require.NoError(t, b.Free(c))
}

func TestGPUDispatchPendingTimingAndRelease(t *testing.T) {
	b := dispatchGPU(t)
	n := 1 << 20
	x := residentWith(t, b, make([]byte, 4*n))
	pd, err := b.RunAsync(core.Batch{
		Fills: []core.Fill{{Buf: x, Value: 0}},
		Steps: []core.Step{
			{Program: core.ProgramFillU32(), Bufs: []core.Buffer{x}, Config: core.DispatchConfig{Scalars: []uint32{3}, Timing: true}},
			{Program: core.ProgramVAddU32(), Bufs: []core.Buffer{x, x, x}},
		},
		Reads: []core.Range{{Buf: x, Offset: 4 * (n - 1), Len: 4}},
	})
	require.NoError(t, err)
	require.ErrorIs(t, b.Free(x), core.ErrInFlight)
	for {
		ready, err := pd.IsReady()
		require.NoError(t, err)
		if ready {
			break
		}
	}
	require.NoError(t, b.Free(x), "ready work holds no buffer")
	out, err := pd.AwaitInto(nil)
	require.NoError(t, err)
	assert.Equal(t, []uint32{6}, words(out[0]))
	d, err := pd.DeviceTime()
	require.NoError(t, err)
	assert.Positive(t, d)
	t.Logf("device time of a fill and a vadd over %d words: %v", n, d)
	assert.Zero(t, b.LaunchResourceCounts().Leases)
}

// BenchmarkGPUW5DependentLaunches is W5: 100 dependent tiny launches (each
// step adds a 4-byte buffer to itself, so it needs the one before) and one
// fence, as one Batch. Target <= 450 us per op; raw C is 3.6 us per launch.
func BenchmarkGPUW5DependentLaunches(b *testing.B) { benchW5(b, openBench(b)) }

// benchW5 times 100 dependent vadd steps of one Batch, one fence each run,
// after one untimed run that loads the module and warms the pools.
func benchW5(b *testing.B, be *core.Backend) {
	h, err := be.Alloc(4)
	if err != nil {
		b.Fatal(err)
	}
	steps := make([]core.Step, 100)
	for i := range steps {
		steps[i] = core.Step{Program: core.ProgramVAddU32(), Bufs: []core.Buffer{h, h, h}}
	}
	batch := core.Batch{Steps: steps}
	if _, err := be.Run(batch, nil); err != nil { // module load and resources outside the timing
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := be.Run(batch, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/100launches")
	if err := be.Free(h); err != nil {
		b.Fatal(err)
	}
}
