//go:build gpu

// GPU tests and benchmarks of CUDA graphs: a captured batch replayed with
// changing inputs against the same graph on the simulated device, a chain
// of dependent launches replayed many times, and W5G (W5's 100 dependent
// launches captured once, then one graph launch and one fence per run):
//
//	.gpu/core.test -test.run 'GPUGraph' -test.v
//	compute-sanitizer --tool memcheck --leak-check full .gpu/core.test -test.run Graph
//	.gpu/core.test -test.run '^$' -test.bench 'GPUW5|GPUCapture' -test.benchtime 200x

package core_test

import (
	"encoding/binary"
	"math/rand"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

func TestGPUGraphReplayMatchesSim(t *testing.T) {
	gpu := dispatchGPU(t)
	simB, _ := openSim(t, sim.Config{})
	gg, sg := newGraphBatch(t, gpu), newGraphBatch(t, simB)
	gpuGraph, err := gpu.Capture(gg.batch)
	require.NoError(t, err)
	simGraph, err := simB.Capture(sg.batch)
	require.NoError(t, err)
	require.ErrorIs(t, gpu.Free(gg.a), core.ErrInFlight)
	r := rand.New(rand.NewSource(15))
	var got, want [][]byte
	for i := range 100 {
		gg.fill(r)
		for k := range gg.in {
			copy(sg.in[k], gg.in[k])
		}
		got, err = gpuGraph.Replay(got)
		require.NoError(t, err)
		want, err = simGraph.Replay(want)
		require.NoError(t, err)
		require.Equal(t, want, got, "replay %d", i)
	}
	assert.Equal(t, uint64(100), gpu.Telemetry().SyncPoints, "one fence per replay")
	require.NoError(t, gpuGraph.Close())
	require.NoError(t, simGraph.Close())
	gg.free(t, gpu)
	sg.free(t, simB)
	assert.Zero(t, gpu.LaunchResourceCounts().Leases)
}

func TestGPUGraphReplayAsyncTiming(t *testing.T) {
	gpu := dispatchGPU(t)
	gb := newGraphBatch(t, gpu)
	gb.batch.Steps[0].Config.Timing = true
	g, err := gpu.Capture(gb.batch)
	require.NoError(t, err)
	gb.fill(rand.New(rand.NewSource(16)))
	want, err := g.Replay(nil)
	require.NoError(t, err)
	p, err := g.ReplayAsync()
	require.NoError(t, err)
	_, err = g.Replay(nil)
	require.ErrorIs(t, err, core.ErrInFlight)
	require.NoError(t, p.Await())
	d, err := p.DeviceTime()
	require.NoError(t, err)
	assert.Positive(t, d)
	got, err := p.AwaitInto(nil)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	t.Logf("device time of one graph launch: %v", d)
	require.NoError(t, g.Close())
	gb.free(t, gpu)
}

// TestGPUGraphDependentChain replays 100 dependent launches (ping-pong
// between two buffers, each adding one) many times and checks the count.
func TestGPUGraphDependentChain(t *testing.T) {
	gpu := dispatchGPU(t)
	const n, steps, replays = 64, 100, 50
	p := residentWith(t, gpu, make([]byte, 4*n))
	q := residentWith(t, gpu, make([]byte, 4*n))
	ones := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(ones[4*i:], 1)
	}
	one := residentWith(t, gpu, ones)
	batch := core.Batch{Steps: make([]core.Step, steps), Reads: []core.Range{{Buf: p, Len: 4 * n}}}
	for i := range batch.Steps {
		src, dst := p, q
		if i%2 == 1 {
			src, dst = q, p
		}
		batch.Steps[i] = core.Step{Program: core.ProgramVAddU32(), Bufs: []core.Buffer{src, one, dst}}
	}
	g, err := gpu.Capture(batch)
	require.NoError(t, err)
	var out [][]byte
	for k := 1; k <= replays; k++ {
		out, err = g.Replay(out)
		require.NoError(t, err)
		for _, w := range words(out[0]) {
			require.Equal(t, uint32(k*steps), w, "replay %d", k)
		}
	}
	require.NoError(t, g.Close())
	for _, h := range []core.Buffer{p, q, one} {
		require.NoError(t, gpu.Free(h))
	}
}

// w5Batch is W5's batch: 100 dependent vadd steps over one 4-byte buffer.
func w5Batch(b *testing.B, be *core.Backend) (core.Batch, core.Buffer) {
	h, err := be.Alloc(4)
	if err != nil {
		b.Fatal(err)
	}
	steps := make([]core.Step, 100)
	for i := range steps {
		steps[i] = core.Step{Program: core.ProgramVAddU32(), Bufs: []core.Buffer{h, h, h}}
	}
	return core.Batch{Steps: steps}, h
}

// BenchmarkGPUW5GGraphReplay is W5G: W5's 100 dependent launches captured
// once, then one graph launch and one fence per op. Target <= 100 us.
func BenchmarkGPUW5GGraphReplay(b *testing.B) {
	be := openBench(b)
	batch, h := w5Batch(b, be)
	if _, err := be.Run(batch, nil); err != nil { // module load outside the timing
		b.Fatal(err)
	}
	g, err := be.Capture(batch)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := g.Replay(nil); err != nil { // the first launch uploads the graph
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := g.Replay(nil); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/100launches")
	if err := g.Close(); err != nil {
		b.Fatal(err)
	}
	// The device time of one whole graph launch, from timing events around
	// it, separates the device's share from the host's.
	batch.Steps[0].Config.Timing = true
	if g, err = be.Capture(batch); err != nil {
		b.Fatal(err)
	}
	var dev time.Duration
	for range 20 {
		p, err := g.ReplayAsync()
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Await(); err != nil {
			b.Fatal(err)
		}
		d, err := p.DeviceTime()
		if err != nil {
			b.Fatal(err)
		}
		dev += d
		if err := p.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(dev.Microseconds())/20, "device-us/graph")
	if err := g.Close(); err != nil {
		b.Fatal(err)
	}
	if err := be.Free(h); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkGPUCaptureW5 times Capture (and Close) of W5's batch. Target
// <= 2 ms.
func BenchmarkGPUCaptureW5(b *testing.B) {
	be := openBench(b)
	batch, h := w5Batch(b, be)
	if _, err := be.Run(batch, nil); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		g, err := be.Capture(batch)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := g.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/capture")
	if err := be.Free(h); err != nil {
		b.Fatal(err)
	}
}
