package core_test

import (
	"bytes"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// misalignedSegments places separate (never touching) segments in a buffer
// of n bytes at every start offset modulo 16 crossed with lengths around the
// 16-byte word, from cursor on: the head, body and tail cases of the
// scatter and gather kernels' aligned and byte paths.
func misalignedSegments(n int, r *rand.Rand) []core.Range {
	lens := []int{1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 255, 256, 4095, 4096, 4097}
	var rs []core.Range
	at := 0
	for mod := range 16 {
		for _, l := range lens {
			if r.Intn(3) > 0 {
				continue
			}
			off := at + 1 + (mod-(at+1)%16+16)%16 // the next offset ≡ mod (16), past a gap
			if off+l >= n {
				return rs
			}
			rs = append(rs, core.Range{Offset: off, Len: l})
			at = off + l
		}
	}
	return rs
}

// checkMisalignedPacked uploads segments at every alignment through the
// packed path (scatter kernel), reads the whole buffers back and compares
// every byte, guards between segments included, with a CPU copy; then reads
// other misaligned segments through the packed path (gather kernel) and
// compares them too. b must pack from two copies.
func checkMisalignedPacked(t *testing.T, b *core.Backend, seed int64) {
	r := rand.New(rand.NewSource(seed))
	sizes := []int{100003, 65536 + 7, 4096 + 9}
	bufs := make([]core.Buffer, len(sizes))
	cpu := make([][]byte, len(sizes))
	for i, n := range sizes {
		var err error
		bufs[i], err = b.Alloc(n)
		require.NoError(t, err)
		cpu[i] = make([]byte, n)
		r.Read(cpu[i])
		require.NoError(t, b.Upload(core.UploadAt{Buf: bufs[i], Data: cpu[i]}))
	}
	packedBefore := b.Telemetry().PackedLaunches
	for round := range 3 {
		var ups []core.UploadAt
		for i, h := range bufs {
			for _, s := range misalignedSegments(h.Len, r) {
				d := make([]byte, s.Len)
				r.Read(d)
				ups = append(ups, core.UploadAt{Buf: h, Offset: s.Offset, Data: d})
				copy(cpu[i][s.Offset:], d)
			}
		}
		r.Shuffle(len(ups), func(i, j int) { ups[i], ups[j] = ups[j], ups[i] })
		require.NoError(t, b.Upload(ups...), "round %d: packed upload of %d misaligned segments", round, len(ups))
		for i, h := range bufs {
			got, err := b.Download(h.All(), nil)
			require.NoError(t, err)
			require.True(t, bytes.Equal(cpu[i], got), "round %d: buffer %d differs from the CPU copy after the scatter", round, i)
		}
		var rs []core.Range
		for _, h := range bufs {
			for _, s := range misalignedSegments(h.Len, r) {
				s.Buf = h
				rs = append(rs, s)
			}
		}
		got, err := b.DownloadMany(rs, nil)
		require.NoError(t, err, "round %d: packed read of %d misaligned segments", round, len(rs))
		for k, x := range rs {
			i := 0
			for bufs[i] != x.Buf {
				i++
			}
			require.True(t, bytes.Equal(cpu[i][x.Offset:x.Offset+x.Len], got[k]),
				"round %d: gathered segment %d (%d bytes at offset %d) differs from the CPU copy", round, k, x.Len, x.Offset)
		}
	}
	require.Greater(t, b.Telemetry().PackedLaunches-packedBefore, uint64(5), "the segments went through the scatter and gather kernels")
	for _, h := range bufs {
		require.NoError(t, b.Free(h))
	}
}

// packFromTwo packs every batch of two or more copies.
var packFromTwo = core.WithTransferTuning(core.TransferTuning{PackMinCopies: 2})

// TestMisalignedPackedSim runs the misaligned scatter/gather check on the
// simulated device, whose Go twin stands in for the kernels; the GPU test
// (misaligned_gpu_test.go) runs the same check through the PTX.
func TestMisalignedPackedSim(t *testing.T) {
	b, _ := openSim(t, sim.Config{}, packFromTwo)
	checkMisalignedPacked(t, b, 1)
}
