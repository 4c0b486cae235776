//go:build gpu

package core_test

import (
	"bytes"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
)

// TestGPUTransferBatchPlansRoundTrip runs batches whose transfers the
// planner packs (many small uploads and reads: a scatter and a gather in
// the batch) and stages (one large upload in chunks), through Run and
// RunAsync, and checks every byte, the reads landing in slots of exactly
// their capacity.
func TestGPUTransferBatchPlansRoundTrip(t *testing.T) {
	b := openXferGPU(t, nil)
	r := rand.New(rand.NewSource(15))
	const count = 300
	var ups []core.UploadAt
	var reads []core.Range
	for range count {
		n := 16 << r.Intn(10)
		n += r.Intn(n)
		h, err := b.Alloc(n)
		require.NoError(t, err)
		data := make([]byte, n)
		r.Read(data)
		ups = append(ups, core.UploadAt{Buf: h, Data: data})
		reads = append(reads, core.Range{Buf: h, Len: n})
	}
	big, err := b.Alloc(24<<20 + 7)
	require.NoError(t, err)
	bigData := make([]byte, big.Len)
	r.Read(bigData)
	for round := range 4 {
		small, async := round%2 == 0, round >= 2
		batch := core.Batch{Uploads: ups, Reads: reads}
		if !small {
			// One large upload alone (staged) and its read back.
			batch = core.Batch{Uploads: []core.UploadAt{{Buf: big, Data: bigData}}, Reads: []core.Range{{Buf: big, Len: big.Len}}}
		}
		dst := make([][]byte, len(batch.Reads))
		for i, x := range batch.Reads {
			dst[i] = make([]byte, 0, x.Len)
		}
		b.ResetTelemetry()
		var out [][]byte
		if async {
			p, err := b.RunAsync(batch)
			require.NoError(t, err)
			out, err = p.AwaitInto(dst)
			require.NoError(t, err)
		} else {
			out, err = b.Run(batch, dst)
			require.NoError(t, err)
		}
		if small {
			require.EqualValues(t, 2, b.Telemetry().PackedLaunches, "round %d: a scatter and a gather", round)
		} else if !async {
			// Run's one large read lands in chunks after the work, each
			// landing a sync point, with no fence of its own.
			require.Greater(t, b.Telemetry().SyncPoints, uint64(1), "round %d: the read landed in chunks", round)
		}
		for i, x := range batch.Uploads {
			require.True(t, bytes.Equal(x.Data, out[i]), "round %d read %d", round, i)
			require.Equal(t, cap(dst[i]), cap(out[i]), "round %d slot %d reused", round, i)
		}
		r.Read(bigData)
	}
}
