package core_test

import (
	"bytes"
	"math/rand"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// smallPipeline runs the pipeline at toy sizes: transfers from 256 bytes in
// 64-byte chunks through 3 blocks, copied by up to 4 goroutines of 16 bytes
// or more each.
var smallPipeline = core.WithTransferTuning(core.TransferTuning{PackMinCopies: -1,
	PipelineMinBytes: 256, ChunkBytes: 64, Blocks: 3, Workers: 4, BytesPerWorker: 16})

func TestPipelinedUploadMovesEveryChunk(t *testing.T) {
	tests := []struct {
		name     string
		bufLen   int
		off, n   int
		chunks   uint64
		blocks   uint64
		viaFull  bool
		pipeline bool
	}{
		{"full, whole chunks", 1024, 0, 1024, 16, 3, true, true},
		{"full, partial last chunk", 1000, 0, 1000, 16, 3, true, true},
		{"at offset", 1000, 13, 700, 11, 3, false, true},
		{"just below the threshold", 300, 0, 255, 1, 0, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, dev := openSim(t, sim.Config{}, smallPipeline)
			r := rand.New(rand.NewSource(int64(tt.n)))
			h, err := b.Alloc(tt.bufLen)
			require.NoError(t, err)
			old := randomBytes(r, tt.bufLen)
			require.NoError(t, b.Upload(core.UploadAt{Buf: h, Data: old}))
			data := randomBytes(r, tt.n)
			b.ResetTelemetry()
			syncs := dev.Calls(sim.OpStreamSynchronize)
			queries, records := dev.Calls(sim.OpEventQuery), dev.Calls(sim.OpEventRecord)
			if tt.viaFull {
				require.NoError(t, b.Upload(core.UploadAt{Buf: h, Data: data}))
			} else {
				require.NoError(t, b.Upload(core.UploadAt{Buf: h, Offset: tt.off, Data: data}))
			}
			want := bytes.Clone(old)
			copy(want[tt.off:], data)
			require.Equal(t, want, simBytes(t, b, dev, h))
			tel := b.Telemetry()
			if !tt.pipeline {
				assert.Equal(t, uint64(1), tel.DeviceCopies)
				assert.Equal(t, uint64(1), tel.SyncPoints)
				return
			}
			assert.Equal(t, tt.chunks, tel.DeviceCopies, "one DMA per chunk")
			// Every chunk past the first round waits for its block's event,
			// and the one stream the DMAs share is synchronized at the end.
			assert.Equal(t, tt.chunks-tt.blocks+1, tel.SyncPoints)
			assert.Equal(t, syncs+1, dev.Calls(sim.OpStreamSynchronize), "one fence")
			assert.GreaterOrEqual(t, dev.Calls(sim.OpEventQuery)-queries, tt.chunks-tt.blocks, "a block is reused only once its DMA is done")
			assert.Equal(t, tt.chunks, dev.Calls(sim.OpEventRecord)-records, "an event after every DMA")
			assert.Equal(t, uint64(tt.n), tel.HostToDeviceBytes)
			assert.Equal(t, uint64(1), tel.UploadOps)
		})
	}
}

func TestPipelinedDownloads(t *testing.T) {
	b, dev := openSim(t, sim.Config{}, smallPipeline)
	r := rand.New(rand.NewSource(9))
	h, err := b.Alloc(1000)
	require.NoError(t, err)
	want := randomBytes(r, h.Len)
	require.NoError(t, b.Upload(core.UploadAt{Buf: h, Data: want}))

	b.ResetTelemetry()
	got, err := b.Download(h.All(), nil)
	require.NoError(t, err)
	require.Equal(t, want, got)
	tel := b.Telemetry()
	assert.Equal(t, uint64(16), tel.DeviceCopies)
	assert.Equal(t, uint64(16), tel.SyncPoints, "one wait per chunk")
	assert.Equal(t, uint64(1000), tel.DeviceToHostBytes)

	rng, err := b.Download(h.Slice(100, 600), nil)
	require.NoError(t, err)
	require.Equal(t, want[100:700], rng)

	roomy := make([]byte, 5, 2000)
	into, err := b.Download(h.All(), roomy)
	require.NoError(t, err)
	require.Equal(t, want, into)
	assert.Equal(t, unsafe.SliceData(roomy), unsafe.SliceData(into), "enough capacity is reused")

	small := make([]byte, 10, 20)
	into, err = b.Download(h.All(), small)
	require.NoError(t, err)
	require.Equal(t, want, into)
	assert.Len(t, small, 10)
	assert.Equal(t, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, small, "a slice too small is left alone")
	_ = dev
}

func TestPipelineFailuresLeakNothing(t *testing.T) {
	bad := cudaapi.CUDA_ERROR_UNKNOWN
	tests := []struct {
		name string
		arm  func(d *sim.Device)
		want string
	}{
		{"staging block fails", func(d *sim.Device) { d.FailNth(sim.OpHostAlloc, 2, cudaapi.CUDA_ERROR_OUT_OF_MEMORY) }, "HostAlloc"},
		{"second stream fails", func(d *sim.Device) { d.FailNth(sim.OpStreamCreate, 2, bad) }, "StreamCreate"},
		{"stream null", func(d *sim.Device) { d.NullNth(sim.OpStreamCreate, 3) }, "StreamCreate"},
		{"a chunk's copy fails", func(d *sim.Device) {
			d.FailNth(sim.OpMemcpyHtoDAsync, 5, bad)
			d.FailNth(sim.OpMemcpyDtoHAsync, 5, bad)
		}, "Memcpy"},
		{"a block's event query fails", func(d *sim.Device) { d.FailNth(sim.OpEventQuery, 2, bad) }, "EventQuery"},
		{"a chunk's event record fails", func(d *sim.Device) { d.FailNth(sim.OpEventRecord, 3, bad) }, "EventRecord"},
	}
	for _, tt := range tests {
		for _, dir := range []string{"upload", "download", "download into"} {
			t.Run(tt.name+"/"+dir, func(t *testing.T) {
				b, dev := openSim(t, sim.Config{}, smallPipeline)
				r := rand.New(rand.NewSource(1))
				h, err := b.Alloc(1000)
				require.NoError(t, err)
				want := randomBytes(r, h.Len)
				ptr, err := b.ResidentDevicePtr(h)
				require.NoError(t, err)
				require.NoError(t, dev.WriteDevice(ptr, want)) // the first pipelined call is the one that fails
				b.ResetTelemetry()
				tt.arm(dev)
				switch dir {
				case "upload":
					err = b.Upload(core.UploadAt{Buf: h, Data: randomBytes(r, h.Len)})
					assert.Zero(t, b.Telemetry().UploadOps)
				case "download":
					var got []byte
					got, err = b.Download(h.All(), nil)
					assert.Nil(t, got)
					assert.Zero(t, b.Telemetry().ReadbackOps)
				default:
					dst := bytes.Repeat([]byte{7}, 10)
					var got []byte
					got, err = b.Download(h.All(), dst)
					assert.Equal(t, unsafe.SliceData(dst), unsafe.SliceData(got))
					assert.Len(t, got, 10)
					assert.Equal(t, bytes.Repeat([]byte{7}, 10), dst, "a new output was to be allocated: dst is untouched")
				}
				require.Error(t, err)
				assert.ErrorIs(t, err, core.ErrDriver)
				assert.Contains(t, err.Error(), tt.want)
				assert.Equal(t, 0, b.LaunchResourceCounts().Leases)
				dev.ClearFaults()
				if dir != "upload" {
					got, err := b.Download(h.All(), nil)
					require.NoError(t, err)
					require.Equal(t, want, got, "the buffer is unchanged")
				}
				require.NoError(t, b.Free(h), "nothing is left in flight")
				require.NoError(t, b.Close())
				sim.RequireNoLeaks(t, dev)
			})
		}
	}
}

// TestTransferPathsAgree runs the same random traffic through every path
// and compares all device contents and reads.
func TestTransferPathsAgree(t *testing.T) {
	opts := map[string]core.Option{
		"default":   nil,
		"per copy":  noPacking,
		"pipelined": smallPipeline,
		"packed small": core.WithTransferTuning(core.TransferTuning{PackMinCopies: 2, PipelineMinBytes: 128,
			ChunkBytes: 32, Blocks: 2, Workers: 3, BytesPerWorker: 8}),
	}
	var ref [][]byte
	for name, opt := range opts {
		b, _ := openSim(t, sim.Config{}, opt)
		r := rand.New(rand.NewSource(42))
		lens := []int{1, 64, 333, 1000, 4096, 17}
		bufs := make([]core.Buffer, 40)
		for i := range bufs {
			h, err := b.Alloc(lens[i%len(lens)])
			require.NoError(t, err)
			bufs[i] = h
		}
		var reads [][]byte
		for round := range 20 {
			var ups []core.UploadAt
			for range 1 + r.Intn(50) {
				h := bufs[r.Intn(len(bufs))]
				off := r.Intn(h.Len)
				ups = append(ups, core.UploadAt{Buf: h, Offset: off, Data: randomBytes(r, r.Intn(h.Len-off+1))})
			}
			require.NoError(t, b.Upload(ups...), "%s round %d", name, round)
			h := bufs[r.Intn(len(bufs))]
			require.NoError(t, b.Upload(core.UploadAt{Buf: h, Data: randomBytes(r, h.Len)}))
			var rs []core.Range
			for range 1 + r.Intn(50) {
				h := bufs[r.Intn(len(bufs))]
				off := r.Intn(h.Len + 1)
				rs = append(rs, core.Range{Buf: h, Offset: off, Len: r.Intn(h.Len - off + 1)})
			}
			got, err := b.DownloadMany(rs, nil)
			require.NoError(t, err)
			for _, g := range got {
				reads = append(reads, nonNil(g))
			}
			one, err := b.Download(bufs[r.Intn(len(bufs))].All(), nil)
			require.NoError(t, err)
			reads = append(reads, one)
		}
		all, err := b.DownloadMany(allOf(bufs), nil)
		require.NoError(t, err)
		reads = append(reads, all...)
		if ref == nil {
			ref = reads
			continue
		}
		require.Equal(t, len(ref), len(reads), name)
		for i := range ref {
			require.Equal(t, ref[i], reads[i], "%s: read %d", name, i)
		}
	}
}

// TestStagedWithABlockPerChunk: when every chunk has a staging block of its
// own, an upload waits on no event (one fence), and a readback of more
// chunks than it has events reuses them in rotation, queuing a chunk only
// once the one that last used its event has landed; both move every byte.
func TestStagedWithABlockPerChunk(t *testing.T) {
	opt := core.WithTransferTuning(core.TransferTuning{PackMinCopies: -1, PipelineMinBytes: 256,
		ChunkBytes: 64, Blocks: 64, Workers: 4, BytesPerWorker: 16})
	b, dev := openSim(t, sim.Config{}, opt)
	r := rand.New(rand.NewSource(5))
	h, err := b.Alloc(1000) // 16 chunks
	require.NoError(t, err)
	want := randomBytes(r, h.Len)
	records, syncs := dev.Calls(sim.OpEventRecord), dev.Calls(sim.OpStreamSynchronize)
	b.ResetTelemetry()
	require.NoError(t, b.Upload(core.UploadAt{Buf: h, Data: want}))
	assert.Equal(t, uint64(16), b.Telemetry().DeviceCopies)
	assert.Equal(t, records, dev.Calls(sim.OpEventRecord), "no block reused: no event")
	assert.Equal(t, syncs+1, dev.Calls(sim.OpStreamSynchronize))
	assert.Equal(t, uint64(1), b.Telemetry().SyncPoints)
	require.Equal(t, want, simBytes(t, b, dev, h))

	records, syncs = dev.Calls(sim.OpEventRecord), dev.Calls(sim.OpStreamSynchronize)
	b.ResetTelemetry()
	got, err := b.Download(h.All(), nil)
	require.NoError(t, err)
	require.Equal(t, want, got)
	assert.Equal(t, records+16, dev.Calls(sim.OpEventRecord), "an event after every DMA")
	assert.Equal(t, syncs, dev.Calls(sim.OpStreamSynchronize), "the events say when the chunks landed")
	assert.Equal(t, uint64(16), b.Telemetry().SyncPoints, "one wait per chunk")
	assert.Equal(t, 0, b.LaunchResourceCounts().Leases)
}
