package core_test

import (
	"errors"
	"math/rand"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// graphBatch is a batch with every kind of work: a clear, a fill, three
// uploads (two of them overlapping, so fusion merges them into a copy of
// their bytes), two dependent steps and two reads. in holds the upload
// data the caller changes between replays.
type graphBatch struct {
	a, c, o core.Buffer
	in      [3][]byte
	batch   core.Batch
}

func newGraphBatch(t testing.TB, b *core.Backend) *graphBatch {
	t.Helper()
	g := &graphBatch{}
	for _, p := range []*core.Buffer{&g.a, &g.c, &g.o} {
		h, err := b.Alloc(16)
		require.NoError(t, err)
		*p = h
	}
	g.in = [3][]byte{make([]byte, 8), make([]byte, 8), make([]byte, 16)}
	g.batch = core.Batch{
		Clears:  []core.Buffer{g.o},
		Fills:   []core.Fill{{Buf: g.c, Value: 0x01}},
		Uploads: []core.UploadAt{{Buf: g.a, Data: g.in[0]}, {Buf: g.a, Offset: 4, Data: g.in[1]}, {Buf: g.c, Data: g.in[2]}},
		Steps: []core.Step{
			{Program: core.ProgramVAddU32(), Bufs: []core.Buffer{g.a, g.c, g.o}},
			{Program: core.ProgramVAddU32(), Bufs: []core.Buffer{g.o, g.a, g.o}},
		},
		Reads: []core.Range{{Buf: g.o, Len: 16}, {Buf: g.a, Offset: 4, Len: 8}},
	}
	return g
}

// fill writes fresh random bytes into the caller's upload slices.
func (g *graphBatch) fill(r *rand.Rand) {
	for _, p := range g.in {
		r.Read(p)
	}
}

func (g *graphBatch) free(t testing.TB, b *core.Backend) {
	t.Helper()
	for _, h := range []core.Buffer{g.a, g.c, g.o} {
		require.NoError(t, b.Free(h))
	}
}

func TestGraphReplayMatchesRunWithChangingInputs(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	ref, _ := openSim(t, sim.Config{})
	gb, rb := newGraphBatch(t, b), newGraphBatch(t, ref)
	g, err := b.Capture(gb.batch)
	require.NoError(t, err)
	require.Zero(t, b.Telemetry().SyncPoints, "Capture runs nothing")
	launches := dev.Calls(sim.OpLaunch)
	r := rand.New(rand.NewSource(1))
	var got, want [][]byte
	for i := range 20 {
		gb.fill(r)
		for k := range gb.in {
			copy(rb.in[k], gb.in[k])
		}
		got, err = g.Replay(got)
		require.NoError(t, err)
		want, err = ref.Run(rb.batch, want)
		require.NoError(t, err)
		require.Equal(t, want, got, "replay %d", i)
		require.Equal(t, uint64(i+1), b.Telemetry().SyncPoints, "one fence per replay")
	}
	assert.Equal(t, uint64(20), dev.Calls(sim.OpGraphLaunch), "one launch per replay")
	assert.Zero(t, dev.Calls(sim.OpEventRecord)+dev.Calls(sim.OpEventQuery), "Replay records and queries no event")
	assert.Equal(t, launches, dev.Calls(sim.OpLaunch), "replays queue no kernel one by one")
	assert.Equal(t, ref.Telemetry().HostToDeviceBytes, b.Telemetry().HostToDeviceBytes)
	assert.Equal(t, ref.Telemetry().KernelLaunches, b.Telemetry().KernelLaunches)
	require.NoError(t, g.Close())
	gb.free(t, b)
	rb.free(t, ref)
}

// TestGraphReplayOfLargeUploadsMatchesRun replays graphs whose uploads
// from Go memory are large enough to be packed on several goroutines (one
// upload alone, several apart, and overlapping ones, which are packed in
// order), changing their bytes between replays, and checks every read
// against Run of the same batch.
func TestGraphReplayOfLargeUploadsMatchesRun(t *testing.T) {
	shapes := map[string][]struct{ buf, off, n int }{
		"one upload":  {{0, 0, 1 << 20}},
		"apart":       {{0, 0, 1 << 20}, {1, 4096, 300 << 10}, {1, 0, 1000}},
		"overlapping": {{0, 0, 1 << 20}, {0, 1 << 19, 1 << 19}, {1, 0, 300 << 10}},
	}
	for name, ups := range shapes {
		t.Run(name, func(t *testing.T) {
			b, _ := openSim(t, sim.Config{})
			ref, _ := openSim(t, sim.Config{})
			var batches [2]core.Batch
			for k, be := range []*core.Backend{b, ref} {
				bufs := make([]core.Buffer, 2)
				for i := range bufs {
					h, err := be.Alloc(1 << 20)
					require.NoError(t, err)
					bufs[i] = h
				}
				for _, u := range ups {
					batches[k].Uploads = append(batches[k].Uploads, core.UploadAt{Buf: bufs[u.buf], Offset: u.off, Data: make([]byte, u.n)})
				}
				batches[k].Reads = []core.Range{bufs[0].All(), bufs[1].All()}
			}
			g, err := b.Capture(batches[0])
			require.NoError(t, err)
			r := rand.New(rand.NewSource(2))
			var got, want [][]byte
			for i := range 4 {
				for k, u := range batches[0].Uploads {
					r.Read(u.Data)
					copy(batches[1].Uploads[k].Data, u.Data)
				}
				got, err = g.Replay(got)
				require.NoError(t, err)
				want, err = ref.Run(batches[1], want)
				require.NoError(t, err)
				require.Equal(t, want, got, "replay %d", i)
			}
			require.NoError(t, g.Close())
		})
	}
}

func TestGraphHoldsBuffersInFlightUntilClose(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	gb := newGraphBatch(t, b)
	g, err := b.Capture(gb.batch)
	require.NoError(t, err)
	require.ErrorIs(t, b.Free(gb.a), core.ErrInFlight)
	require.ErrorIs(t, b.Close(), core.ErrInFlight)
	g2, err := b.Capture(gb.batch) // a second graph over the same buffers is fine
	require.NoError(t, err, "graphs share buffers")
	require.NoError(t, g.Close())
	require.ErrorIs(t, b.Free(gb.a), core.ErrInFlight, "the second graph still holds it")
	_, err = g.Replay(nil)
	require.ErrorIs(t, err, core.ErrClosed)
	_, err = g.ReplayAsync()
	require.ErrorIs(t, err, core.ErrClosed)
	require.ErrorIs(t, g.Close(), core.ErrClosed)
	require.Equal(t, 1, dev.Live().GraphExecs)
	require.NoError(t, g2.Close())
	gb.free(t, b)
}

func TestGraphCloseReleasesEverything(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	gb := newGraphBatch(t, b)
	g, err := b.Capture(gb.batch)
	require.NoError(t, err)
	_, err = g.Replay(nil)
	require.NoError(t, err)
	require.NoError(t, g.Close())
	gb.free(t, b)
	require.NoError(t, b.Close())
	sim.RequireNoLeaks(t, dev)
	_, err = b.Capture(gb.batch)
	require.ErrorIs(t, err, core.ErrClosed)
}

func TestGraphCaptureValidatesLikeRun(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	gb := newGraphBatch(t, b)
	stale, err := b.Alloc(16)
	require.NoError(t, err)
	require.NoError(t, b.Free(stale))
	bad := []func(*core.Batch){
		func(x *core.Batch) { x.Reads[1].Len = 16 },
		func(x *core.Batch) { x.Uploads[0].Offset = 12 },
		func(x *core.Batch) { x.Steps[1].Bufs = x.Steps[1].Bufs[:2] },
		func(x *core.Batch) { x.Steps[0].Program = nil },
		func(x *core.Batch) { x.Clears = append(x.Clears, stale) },
	}
	dev.ResetCalls()
	for i, mutate := range bad {
		x := gb.batch
		x.Reads = append([]core.Range(nil), x.Reads...)
		x.Uploads = append([]core.UploadAt(nil), x.Uploads...)
		x.Steps = append([]core.Step(nil), x.Steps...)
		mutate(&x)
		_, runErr := b.Run(x, nil)
		require.Error(t, runErr, "case %d", i)
		g, err := b.Capture(x)
		require.Nil(t, g)
		var ce, re *core.Error
		require.ErrorAs(t, err, &ce, "case %d", i)
		require.ErrorAs(t, runErr, &re)
		assert.Equal(t, re.Kind, ce.Kind, "case %d", i)
		assert.Equal(t, re.Detail, ce.Detail, "case %d", i)
		assert.Equal(t, "Capture", ce.Op)
	}
	assert.Zero(t, dev.Calls(sim.OpStreamBeginCapture), "nothing captured")
	gb.free(t, b) // nothing was left in flight
}

// plainDriver hides every optional capability of the driver it wraps.
type plainDriver struct{ core.Driver }

func TestGraphCaptureUnsupportedDriver(t *testing.T) {
	dev := sim.New(sim.Config{TotalMemory: testMemory})
	b, err := core.Open(plainDriver{dev})
	require.NoError(t, err)
	gb := newGraphBatch(t, b)
	_, err = b.Capture(gb.batch)
	require.ErrorIs(t, err, core.ErrUnsupported)
	assert.Contains(t, err.Error(), "cuStreamBeginCapture")
	gb.free(t, b)
	require.NoError(t, b.Close())
	sim.RequireNoLeaks(t, dev)
}

func TestGraphReplayAsyncSerializesReplays(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	gb := newGraphBatch(t, b)
	gb.batch.Steps[1].Config.Timing = true
	g, err := b.Capture(gb.batch)
	require.NoError(t, err)
	gb.fill(rand.New(rand.NewSource(2)))
	want, err := g.Replay(nil)
	require.NoError(t, err)

	p, err := g.ReplayAsync()
	require.NoError(t, err)
	clear(gb.in[0]) // packed already: this change is for the next replay
	_, err = g.ReplayAsync()
	require.ErrorIs(t, err, core.ErrInFlight)
	_, err = g.Replay(nil)
	require.ErrorIs(t, err, core.ErrInFlight)
	require.ErrorIs(t, g.Close(), core.ErrInFlight)
	require.NoError(t, p.Await())
	d, err := p.DeviceTime()
	require.NoError(t, err)
	assert.Positive(t, d)
	require.ErrorIs(t, g.Close(), core.ErrInFlight, "reads not collected yet")
	got, err := p.AwaitInto(nil)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	assert.Zero(t, dev.Calls(sim.OpEventQuery)+dev.Calls(sim.OpEventSynchronize), "the fence is one stream synchronization")

	got, err = g.Replay(nil)
	require.NoError(t, err)
	assert.NotEqual(t, want, got, "the cleared upload reached the device")
	require.NoError(t, g.Close())
	gb.free(t, b)
}

func TestGraphConcurrentReplaysAreSerialized(t *testing.T) {
	b, _ := openSim(t, sim.Config{})
	gb := newGraphBatch(t, b)
	gb.fill(rand.New(rand.NewSource(3)))
	g, err := b.Capture(gb.batch)
	require.NoError(t, err)
	want, err := g.Replay(nil)
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				got, err := g.Replay(nil)
				if err == nil && !assert.ObjectsAreEqual(want, got) {
					err = errors.New("a concurrent replay read different bytes")
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, g.Close())
	gb.free(t, b)
}

func TestGraphEmptyBatch(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	h, err := b.Alloc(8)
	require.NoError(t, err)
	g, err := b.Capture(core.Batch{Reads: []core.Range{{Buf: h}}})
	require.NoError(t, err)
	got, err := g.Replay([][]byte{[]byte("old")})
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Empty(t, got[0])
	assert.Zero(t, dev.Calls(sim.OpStreamBeginCapture)+dev.Calls(sim.OpGraphLaunch), "nothing reaches the device")
	require.ErrorIs(t, b.Free(h), core.ErrInFlight)
	require.NoError(t, g.Close())
	require.NoError(t, b.Free(h))
}

func TestGraphNilReceivers(t *testing.T) {
	var g *core.Graph
	_, err := g.Replay(nil)
	require.ErrorIs(t, err, core.ErrInvalidArgument)
	_, err = g.ReplayAsync()
	require.ErrorIs(t, err, core.ErrInvalidArgument)
	require.ErrorIs(t, g.Close(), core.ErrInvalidArgument)
	var b *core.Backend
	_, err = b.Capture(core.Batch{})
	require.ErrorIs(t, err, core.ErrInvalidArgument)
}

// TestGraphCaptureFaultsLeakNothing fails each driver call Capture makes
// and checks that the failure is reported, nothing stays in flight and
// nothing leaks.
func TestGraphCaptureFaultsLeakNothing(t *testing.T) {
	faults := []struct {
		op   sim.Op
		null bool
	}{
		{op: sim.OpHostAlloc}, {op: sim.OpStreamCreate}, {op: sim.OpStreamBeginCapture},
		{op: sim.OpMemsetD8Async}, {op: sim.OpMemcpyHtoDAsync}, {op: sim.OpLaunch},
		{op: sim.OpMemcpyDtoHAsync}, {op: sim.OpStreamEndCapture}, {op: sim.OpGraphInstantiate},
		{op: sim.OpStreamEndCapture, null: true}, {op: sim.OpGraphInstantiate, null: true},
	}
	for _, f := range faults {
		t.Run(f.op.String(), func(t *testing.T) {
			b, dev := openSim(t, sim.Config{})
			gb := newGraphBatch(t, b)
			if f.null {
				dev.NullNth(f.op, 1)
			} else {
				dev.FailNth(f.op, 1, cudaapi.CUDA_ERROR_OUT_OF_MEMORY)
			}
			g, err := b.Capture(gb.batch)
			require.Nil(t, g)
			require.ErrorIs(t, err, core.ErrDriver)
			assert.Zero(t, b.LaunchResourceCounts().Leases)
			// The Backend recovers: a capture now works and replays.
			g, err = b.Capture(gb.batch)
			require.NoError(t, err)
			_, err = g.Replay(nil)
			require.NoError(t, err)
			require.NoError(t, g.Close())
			gb.free(t, b)
		})
	}
}

func TestGraphReplayFaults(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	gb := newGraphBatch(t, b)
	g, err := b.Capture(gb.batch)
	require.NoError(t, err)
	dst := [][]byte{[]byte("keep")}
	for _, op := range []sim.Op{sim.OpGraphLaunch, sim.OpStreamSynchronize} {
		dev.FailNth(op, 1, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
		out, err := g.Replay(dst)
		require.ErrorIs(t, err, core.ErrDriver, "%s", op)
		require.Equal(t, [][]byte{[]byte("keep")}, out, "%s: dst unchanged", op)
		_, err = g.Replay(nil)
		require.NoError(t, err, "%s: the graph replays again", op)
	}
	for _, op := range []sim.Op{sim.OpGraphLaunch, sim.OpEventRecord} {
		dev.FailNth(op, 1, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
		p, err := g.ReplayAsync()
		require.Nil(t, p)
		require.ErrorIs(t, err, core.ErrDriver, "async %s", op)
	}
	p, err := g.ReplayAsync()
	require.NoError(t, err)
	dev.FailNth(sim.OpStreamSynchronize, 1, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
	_, err = p.AwaitInto(dst)
	require.ErrorIs(t, err, core.ErrDriver)
	_, err = g.Replay(nil)
	require.NoError(t, err, "a failed wait releases the graph for the next replay")
	assert.Zero(t, b.LaunchResourceCounts().Leases)
	require.NoError(t, g.Close())
	gb.free(t, b)
}

func TestGraphReplayUndrainableStreamBreaksGraph(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	gb := newGraphBatch(t, b)
	g, err := b.Capture(gb.batch)
	require.NoError(t, err)
	// The fence fails and so does the drain after it: the stream and the
	// graph's staging go to the quarantine.
	dev.FailNth(sim.OpStreamSynchronize, 1, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
	dev.FailNth(sim.OpStreamSynchronize, 2, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
	_, err = g.Replay(nil)
	require.ErrorIs(t, err, core.ErrDriver)
	assert.Equal(t, 1, b.LaunchResourceCounts().Quarantined)
	_, err = g.Replay(nil)
	require.ErrorIs(t, err, core.ErrDriver, "a broken graph refuses replays")
	require.NoError(t, g.Close())
	require.NoError(t, b.Close(), "the quarantined stream synchronizes at Close")
	sim.RequireNoLeaks(t, dev)
}

func TestGraphCloseFailureKeepsGraphOpen(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	gb := newGraphBatch(t, b)
	g, err := b.Capture(gb.batch)
	require.NoError(t, err)
	dev.FailNth(sim.OpGraphExecDestroy, 1, cudaapi.CUDA_ERROR_UNKNOWN)
	require.ErrorIs(t, g.Close(), core.ErrDriver)
	_, err = g.Replay(nil)
	require.NoError(t, err, "a failed Close changes nothing")
	dev.FailNth(sim.OpGraphDestroy, 1, cudaapi.CUDA_ERROR_UNKNOWN)
	require.ErrorIs(t, g.Close(), core.ErrDriver)
	require.ErrorIs(t, b.Free(gb.a), core.ErrInFlight, "still open")
	_, err = g.Replay(nil)
	require.ErrorIs(t, err, core.ErrDriver, "its executable graph is gone")
	require.NoError(t, g.Close())
	gb.free(t, b)
}

// TestCaptureDispatcherBuffers: a graph of dispatcher Buffers holds them
// in flight until it is closed, against the dispatcher's Free and Close.
func TestCaptureDispatcherBuffers(t *testing.T) {
	d, b, _ := openOpt(t)
	ids := make([]core.Buffer, 3)
	for i := range ids {
		id, err := d.Alloc(16)
		require.NoError(t, err)
		ids[i] = id
	}
	in := u32s(1, 2, 3, 4)
	g, err := b.Capture(core.Batch{
		Fills:   []core.Fill{{Buf: ids[1], Value: 0}},
		Uploads: []core.UploadAt{{Buf: ids[0], Data: in}},
		Steps:   []core.Step{{Program: core.ProgramVAddU32(), Bufs: ids}},
		Reads:   []core.Range{{Buf: ids[2], Len: 16}},
	})
	require.NoError(t, err)
	require.ErrorIs(t, d.Free(ids[0]), core.ErrInFlight)
	require.ErrorIs(t, d.Close(), core.ErrInFlight)
	for k := range uint32(3) {
		copy(in, u32s(k, k+1, k+2, k+3))
		out, err := g.Replay(nil)
		require.NoError(t, err)
		assert.Equal(t, []uint32{k, k + 1, k + 2, k + 3}, words(out[0]))
	}
	_, err = b.Capture(core.Batch{Clears: []core.Buffer{{ID: 999, Len: 16}}})
	require.ErrorIs(t, err, core.ErrUnknownHandle)
	require.NoError(t, g.Close())
	require.NoError(t, d.Free(ids[0]))
	require.NoError(t, d.Close())
	require.NoError(t, b.Close())
}

// BenchmarkSimW5GGraphReplay is W5G on the simulated device: W5's 100
// dependent launches captured once, then one replay (one graph launch and
// one fence) per op. It measures the Backend's per-replay overhead plus
// sim's execution of the 100 launches.
func BenchmarkSimW5GGraphReplay(b *testing.B) {
	be, _ := openSim(b, sim.Config{})
	h, err := be.Alloc(4)
	require.NoError(b, err)
	steps := make([]core.Step, 100)
	for i := range steps {
		steps[i] = core.Step{Program: core.ProgramVAddU32(), Bufs: []core.Buffer{h, h, h}}
	}
	g, err := be.Capture(core.Batch{Steps: steps})
	require.NoError(b, err)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := g.Replay(nil); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	require.NoError(b, g.Close())
	require.NoError(b, be.Free(h))
}
