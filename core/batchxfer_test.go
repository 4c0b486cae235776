package core_test

import (
	"bytes"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// TestBatchTransfersArePlanned: a batch's many small uploads and reads take
// the packed plan (one scatter, one gather), one large upload the staged
// plan (several DMAs, no launch), and the bytes land where they belong,
// whether the batch runs through Run or RunAsync.
func TestBatchTransfersArePlanned(t *testing.T) {
	b, dev := openSim(t, sim.Config{TotalMemory: 256 << 20})
	rng := rand.New(rand.NewSource(3))
	const n = 64
	hs := make([]core.Buffer, n)
	var ups []core.UploadAt
	var reads []core.Range
	for i := range hs {
		h, err := b.Alloc(1024 + i)
		require.NoError(t, err)
		hs[i] = h
		data := make([]byte, h.Len)
		rng.Read(data)
		ups = append(ups, core.UploadAt{Buf: h, Data: data})
		reads = append(reads, core.Range{Buf: h, Len: h.Len})
	}
	b.ResetTelemetry()
	got, err := b.Run(core.Batch{Uploads: ups, Reads: reads}, nil)
	require.NoError(t, err)
	for i := range hs {
		require.True(t, bytes.Equal(got[i], ups[i].Data), "read %d", i)
	}
	tel := b.Telemetry()
	assert.EqualValues(t, 2, tel.PackedLaunches, "one scatter and one gather")
	assert.Less(t, tel.DeviceCopies, uint64(2*n), "packed: fewer DMAs than copies")

	big, err := b.Alloc(8 << 20)
	require.NoError(t, err)
	data := make([]byte, big.Len)
	rng.Read(data)
	before := dev.CallCounts()[sim.OpMemcpyHtoDAsync]
	p, err := b.RunAsync(core.Batch{Uploads: []core.UploadAt{{Buf: big, Data: data}}, Reads: []core.Range{{Buf: big, Len: big.Len}}})
	require.NoError(t, err)
	want := bytes.Clone(data)
	clear(data) // RunAsync copied the upload before returning
	out, err := p.AwaitInto(nil)
	require.NoError(t, err)
	require.True(t, bytes.Equal(out[0], want), "the staged upload read back")
	assert.Greater(t, dev.CallCounts()[sim.OpMemcpyHtoDAsync]-before, uint64(1), "8 MiB staged in several DMAs")
}

// TestCapturedBatchRecordsThePackedPlan: a captured graph of a batch the
// planner packs records the packed plan Run would choose (one scatter and
// one gather launch, a few DMAs instead of one per item) and replays it
// correctly with new upload bytes each time.
func TestCapturedBatchRecordsThePackedPlan(t *testing.T) {
	b, _ := openSim(t, sim.Config{TotalMemory: 64 << 20})
	const n = 40
	var ups []core.UploadAt
	var reads []core.Range
	for i := range n {
		h, err := b.Alloc(256)
		require.NoError(t, err)
		ups = append(ups, core.UploadAt{Buf: h, Data: bytes.Repeat([]byte{byte(i)}, 256)})
		reads = append(reads, core.Range{Buf: h, Len: 256})
	}
	g, err := b.Capture(core.Batch{Uploads: ups, Reads: reads})
	if err != nil {
		t.Skipf("capture unsupported: %v", err)
	}
	defer func() { require.NoError(t, g.Close()) }()
	for round := range 3 {
		for i := range ups {
			for k := range ups[i].Data {
				ups[i].Data[k] = byte(i + 7*round)
			}
		}
		b.ResetTelemetry()
		got, err := g.Replay(nil)
		require.NoError(t, err)
		for i := range ups {
			require.True(t, bytes.Equal(got[i], ups[i].Data), "round %d read %d", round, i)
		}
		tel := b.Telemetry()
		assert.Equal(t, uint64(2), tel.PackedLaunches, "round %d: one scatter and one gather", round)
		assert.Less(t, tel.DeviceCopies, uint64(n), "round %d: packed, not one DMA per item", round)
	}
}
