package core_test

import (
	"bytes"
	"fmt"
	"math/rand"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// partsGraph is a captured batch of W3's shape on the simulated device:
// n buffers of size bytes, every eighth of them uploaded from in by the
// graph itself, all of them read back. want holds what each replay must
// read; the test changes in and the other buffers between replays.
type partsGraph struct {
	b     *core.Backend
	dev   *sim.Device
	hs    []core.Buffer
	in    map[int][]byte // upload data the graph reads, by buffer
	want  [][]byte
	batch core.Batch
	g     *core.Graph
}

func newPartsGraph(t *testing.T, n, size int, opts ...core.Option) *partsGraph {
	t.Helper()
	b, dev := openSim(t, sim.Config{TotalMemory: 1 << 30}, opts...)
	p := &partsGraph{b: b, dev: dev, in: map[int][]byte{}}
	for i := range n {
		h, err := b.Alloc(size)
		require.NoError(t, err)
		p.hs = append(p.hs, h)
		p.want = append(p.want, make([]byte, size))
		if i%8 == 3 {
			p.in[i] = make([]byte, size)
			p.batch.Uploads = append(p.batch.Uploads, core.UploadAt{Buf: h, Data: p.in[i]})
		}
	}
	p.batch.Reads = allOf(p.hs)
	g, err := b.Capture(p.batch)
	require.NoError(t, err)
	p.g = g
	t.Cleanup(func() {
		dev.ClearFaults()
		require.NoError(t, g.Close())
	})
	return p
}

// change writes fresh bytes into the graph's upload data and, with direct
// uploads, into a few other buffers.
func (p *partsGraph) change(t *testing.T, r *rand.Rand) {
	t.Helper()
	for i, d := range p.in {
		r.Read(d)
		copy(p.want[i], d)
	}
	for k := 0; k < 16; k++ {
		i := r.Intn(len(p.hs))
		if p.in[i] != nil {
			continue
		}
		r.Read(p.want[i])
		require.NoError(t, p.b.Upload(core.UploadAt{Buf: p.hs[i], Data: p.want[i]}))
	}
}

// check compares got with want, slot by slot.
func (p *partsGraph) check(t *testing.T, what string, got [][]byte) {
	t.Helper()
	require.Len(t, got, len(p.want), what)
	for i := range p.want {
		if !bytes.Equal(p.want[i], got[i]) {
			t.Fatalf("%s: slot %d differs", what, i)
		}
	}
}

// TestGraphPackedReadsLandInParts: a captured batch of 1024 reads of 4 KiB
// (W3's shape), as the simulated device plans it, replays with its packed
// reads landing in several parts after the launch (one DMA and one event
// each, no fence), and every replay, with the device contents changed
// before it, reads what Run and DownloadMany read, into the caller's slots
// (no new storage once their capacity fits).
func TestGraphPackedReadsLandInParts(t *testing.T) {
	r := rand.New(rand.NewSource(27))
	p := newPartsGraph(t, 1024, 4096)
	var dst [][]byte
	for k := range 4 {
		p.change(t, r)
		p.dev.ResetCalls()
		tel0 := p.b.Telemetry()
		prev := append([][]byte(nil), dst...)
		out, err := p.g.Replay(dst)
		require.NoError(t, err)
		calls, tel := p.dev.CallCounts(), p.b.Telemetry()
		parts := calls[sim.OpMemcpyDtoHAsync]
		assert.Greater(t, parts, uint64(1), "replay %d: the reads land in parts", k)
		assert.Equal(t, parts, calls[sim.OpEventRecord], "replay %d: an event after each part", k)
		assert.Equal(t, uint64(1), calls[sim.OpGraphLaunch], "replay %d: one launch", k)
		assert.Zero(t, calls[sim.OpStreamSynchronize], "replay %d: the last part's landing is the fence", k)
		assert.Equal(t, parts, tel.SyncPoints-tel0.SyncPoints, "replay %d: a sync point per part", k)
		// The graph's two DMAs (the upload block, the read table) and the parts.
		assert.Equal(t, parts+2, tel.DeviceCopies-tel0.DeviceCopies, "replay %d: device copies", k)
		assert.Equal(t, uint64(1024*4096), tel.DeviceToHostBytes-tel0.DeviceToHostBytes, "replay %d: bytes read", k)
		p.check(t, fmt.Sprintf("replay %d", k), out)
		if k > 0 {
			require.Equal(t, unsafe.SliceData(prev), unsafe.SliceData(out), "replay %d reuses the slots", k)
			for i := range out {
				require.Equal(t, unsafe.SliceData(prev[i]), unsafe.SliceData(out[i]), "replay %d: slot %d's storage reused", k, i)
			}
		}
		dst = out

		run, err := p.b.Run(p.batch, nil)
		require.NoError(t, err)
		p.check(t, fmt.Sprintf("Run %d", k), run)
		many, err := p.b.DownloadMany(p.batch.Reads, nil)
		require.NoError(t, err)
		p.check(t, fmt.Sprintf("DownloadMany %d", k), many)
	}
	assert.Zero(t, p.b.LaunchResourceCounts().Leases)
}

// TestGraphPartsReplayFaults: a replay whose part DMA, event record or
// landing query fails (first, middle and last part) returns the driver's
// error under Graph.Replay naming the call, leaves dst and every slot
// header as they were (each slot's storage holds its old bytes or its
// read's), holds no lease and creates nothing on the device, and the
// Graph then replays correctly.
func TestGraphPartsReplayFaults(t *testing.T) {
	faults := []struct {
		op  sim.Op
		nth int
	}{{sim.OpMemcpyDtoHAsync, 1}, {sim.OpMemcpyDtoHAsync, 2}, {sim.OpMemcpyDtoHAsync, 10},
		{sim.OpEventRecord, 1}, {sim.OpEventRecord, 6}, {sim.OpEventQuery, 1}, {sim.OpEventQuery, 4}, {sim.OpEventQuery, 10}}
	for _, f := range faults {
		t.Run(fmt.Sprintf("%v#%d", f.op, f.nth), func(t *testing.T) {
			r := rand.New(rand.NewSource(int64(f.nth)))
			p := newPartsGraph(t, 1024, 4096)
			p.change(t, r)
			out, err := p.g.Replay(nil)
			require.NoError(t, err)
			parts := p.dev.Calls(sim.OpMemcpyDtoHAsync)
			require.GreaterOrEqual(t, parts, uint64(f.nth), "the fault falls inside the replay")
			p.change(t, r)
			dst := out[:len(out):len(out)]
			headers := append([][]byte(nil), dst...)
			old := make([][]byte, len(dst))
			for i := range dst {
				old[i] = bytes.Clone(dst[i])
			}
			live, tel0 := p.dev.Live(), p.b.Telemetry()
			p.dev.FailNth(f.op, f.nth, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
			got, err := p.g.Replay(dst)
			var ce *core.Error
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, "Graph.Replay", ce.Op)
			assert.Equal(t, core.KindDriver, ce.Kind)
			assert.Contains(t, ce.Detail, f.op.String())
			require.Equal(t, unsafe.SliceData(dst), unsafe.SliceData(got), "dst returned unchanged")
			for i := range dst {
				require.Equal(t, unsafe.SliceData(headers[i]), unsafe.SliceData(dst[i]), "slot %d header", i)
				require.Len(t, dst[i], len(headers[i]), "slot %d header", i)
				require.True(t, bytes.Equal(old[i], dst[i]) || bytes.Equal(p.want[i], dst[i]),
					"slot %d holds neither its old bytes nor its read's", i)
			}
			counts := p.b.LaunchResourceCounts()
			assert.Zero(t, counts.Leases, "leases held after the failure")
			assert.Zero(t, counts.Quarantined)
			// The failed leases' streams and events are destroyed, not pooled
			// again; nothing else changes.
			after := p.dev.Live()
			assert.LessOrEqual(t, after.Streams, live.Streams)
			assert.LessOrEqual(t, after.Events, live.Events)
			after.Streams, after.Events = live.Streams, live.Events
			assert.Equal(t, live, after, "device objects after the failure")
			tel := p.b.Telemetry()
			assert.Zero(t, tel.SyncPoints-tel0.SyncPoints, "a failed landing counts no sync point")

			p.dev.ClearFaults()
			out, err = p.g.Replay(dst)
			require.NoError(t, err, "the graph replays after a transient fault")
			p.check(t, "replay after the fault", out)
		})
	}
}

// TestGraphPartsUndrainableReplay: when a landing fails and the stream
// cannot be drained either, the streams go to the quarantine with the
// graph's staging, the graph refuses further replays, and Close and the
// Backend's Close release everything.
func TestGraphPartsUndrainableReplay(t *testing.T) {
	p := newPartsGraph(t, 256, 4096)
	dst := [][]byte{[]byte("keep")}
	p.dev.FailNth(sim.OpEventQuery, 2, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
	p.dev.FailNth(sim.OpStreamSynchronize, 1, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
	out, err := p.g.Replay(dst)
	require.ErrorIs(t, err, core.ErrDriver)
	require.Equal(t, [][]byte{[]byte("keep")}, out)
	assert.Equal(t, 1, p.b.LaunchResourceCounts().Quarantined)
	_, err = p.g.Replay(nil)
	require.ErrorIs(t, err, core.ErrDriver, "a broken graph refuses replays")
	counts := p.b.LaunchResourceCounts()
	assert.Equal(t, counts.Quarantined, counts.Leases, "every lease but the quarantined ones went back")
}

// TestGraphPartsReplayAsync: an asynchronous replay of a graph whose reads
// land in parts queues their whole block's DMA after the launch instead
// (one DMA, counted), and AwaitInto delivers what Run reads; a failure of
// that DMA refuses the replay with nothing busy or held, and the graph
// replays again.
func TestGraphPartsReplayAsync(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	p := newPartsGraph(t, 512, 4096)
	for k := range 3 {
		p.change(t, r)
		p.dev.ResetCalls()
		tel0 := p.b.Telemetry()
		pd, err := p.g.ReplayAsync()
		require.NoError(t, err)
		out, err := pd.AwaitInto(nil)
		require.NoError(t, err)
		p.check(t, fmt.Sprintf("ReplayAsync %d", k), out)
		assert.Equal(t, uint64(1), p.dev.Calls(sim.OpMemcpyDtoHAsync), "one DMA of the whole block")
		tel := p.b.Telemetry()
		assert.Equal(t, uint64(3), tel.DeviceCopies-tel0.DeviceCopies, "upload block, read table, read block")
		assert.Equal(t, uint64(1), tel.SyncPoints-tel0.SyncPoints, "one fence")
	}
	p.dev.FailNth(sim.OpMemcpyDtoHAsync, 1, cudaapi.CUDA_ERROR_UNKNOWN)
	pd, err := p.g.ReplayAsync()
	require.Nil(t, pd)
	var ce *core.Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "Graph.ReplayAsync", ce.Op)
	assert.Contains(t, ce.Detail, "MemcpyDtoHAsync")
	assert.Zero(t, p.b.LaunchResourceCounts().Leases)
	p.change(t, r)
	out, err := p.g.Replay(nil)
	require.NoError(t, err, "the graph replays after the failed launch")
	p.check(t, "Replay after the failed ReplayAsync", out)
}

// TestGraphPartsReplayInto: reads given destinations at capture
// (Batch.Into: small ones in pinned memory, which land in the packed block
// like the others, one large one moved by its own DMA, and one in Go
// memory) and empty reads come out of a replay in parts exactly as Run
// returns them.
func TestGraphPartsReplayInto(t *testing.T) {
	r := rand.New(rand.NewSource(9))
	b, dev := openSim(t, sim.Config{TotalMemory: 1 << 30})
	const n, size = 300, 4096
	var reads []core.Range
	var want [][]byte
	for range n {
		h, err := b.Alloc(size)
		require.NoError(t, err)
		reads = append(reads, h.All())
		want = append(want, make([]byte, size))
	}
	big, err := b.Alloc(128 << 10)
	require.NoError(t, err)
	reads = append(reads, big.All(), reads[7].Buf.Slice(0, 0))
	want = append(want, make([]byte, big.Len), nil)
	pin, err := b.AllocHostPinned(40*size + big.Len)
	require.NoError(t, err)
	defer func() { require.NoError(t, pin.Free()) }()
	into := make([][]byte, len(reads))
	for i := range 40 {
		into[3*i] = pin.Bytes()[i*size : (i+1)*size]
	}
	into[n] = pin.Bytes()[40*size:]
	into[n-1] = make([]byte, size)
	g, err := b.Capture(core.Batch{Reads: reads, Into: into})
	require.NoError(t, err)
	defer func() { require.NoError(t, g.Close()) }()
	dst := make([][]byte, len(reads))
	for k := range 3 {
		for i, rg := range reads[:n+1] {
			r.Read(want[i])
			require.NoError(t, b.Upload(core.UploadAt{Buf: rg.Buf, Data: want[i]}))
		}
		dev.ResetCalls()
		out, err := g.Replay(dst)
		require.NoError(t, err)
		assert.Greater(t, dev.Calls(sim.OpMemcpyDtoHAsync), uint64(2), "replay %d lands in parts", k)
		require.Len(t, out, len(reads))
		for i := range reads {
			require.True(t, bytes.Equal(want[i], out[i]), "replay %d: read %d", k, i)
			if into[i] != nil {
				require.Equal(t, unsafe.SliceData(into[i]), unsafe.SliceData(out[i]), "replay %d: read %d lands in its Into", k, i)
			}
		}
		require.Len(t, out[n+1], 0, "the empty read")
		dst = out
	}
	run, err := b.Run(core.Batch{Reads: reads}, nil)
	require.NoError(t, err)
	for i := range reads {
		require.True(t, bytes.Equal(run[i], dst[i]), "read %d against Run", i)
	}
}
