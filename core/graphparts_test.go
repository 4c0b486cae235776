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
	_ "github.com/vyre-go/vyrecuda/cudaapi"
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
