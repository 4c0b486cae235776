//go:build gpu

package core_test

import (
	"bytes"
	"math/rand"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
)

// TestGPUTransferEveryPlanRoundTrips moves random bytes of sizes on both
// sides of every planner boundary through every plan the planner picks on
// this host (per-copy, staged at several chunkings, direct from and into
// pinned memory, packed in one and several parts) and checks every byte,
// reading back into destinations of exactly the needed capacity.
func TestGPUTransferEveryPlanRoundTrips(t *testing.T) {
	b := openXferGPU(t, nil)
	r := rand.New(rand.NewSource(14))
	for _, n := range []int{1, 4096, 65536 + 3, 256 << 10, 1<<20 + 13, 4 << 20, 16<<20 + 1, 72<<20 + 5} {
		want := make([]byte, n)
		r.Read(want)
		h, err := b.Alloc(n)
		require.NoError(t, err)
		require.NoError(t, b.Upload(core.UploadAt{Buf: h, Data: want}), "%d bytes", n)
		dst := make([]byte, 0, n)
		got, err := b.Download(h.All(), dst)
		require.NoError(t, err)
		require.True(t, bytes.Equal(want, got), "%d bytes from a Go slice", n)
		require.Equal(t, unsafe.SliceData(dst), unsafe.SliceData(got), "exact capacity reused")

		// Direct: from and into memory pinned through the Backend.
		p, err := b.AllocHostPinned(n)
		require.NoError(t, err)
		r.Read(p.Bytes())
		require.NoError(t, b.Upload(core.UploadAt{Buf: h, Data: p.Bytes()[:n]}))
		back := make([]byte, n)
		copy(back, p.Bytes())
		clear(p.Bytes())
		got, err = b.Download(h.All(), p.Bytes()[:0:n])
		require.NoError(t, err)
		require.True(t, bytes.Equal(back, got), "%d bytes pinned", n)
		require.NoError(t, p.Free())
		require.NoError(t, b.Free(h))
	}
	// Packed: many buffers of mixed sizes, uploaded and read back into
	// slots of exactly their capacity.
	const count = 700
	hs := make([]core.Buffer, count)
	ups := make([]core.UploadAt, count)
	dst := make([][]byte, count)
	for i := range hs {
		n := 16 << r.Intn(14)
		n += r.Intn(n)
		h, err := b.Alloc(n)
		require.NoError(t, err)
		data := make([]byte, n)
		r.Read(data)
		hs[i], ups[i], dst[i] = h, core.UploadAt{Buf: h, Data: data}, make([]byte, 0, n)
	}
	b.ResetTelemetry()
	require.NoError(t, b.Upload(ups...))
	require.NotZero(t, b.Telemetry().PackedLaunches, "packed")
	out, err := b.DownloadMany(allOf(hs), dst)
	require.NoError(t, err)
	for i := range hs {
		require.True(t, bytes.Equal(ups[i].Data, out[i]), "buffer %d", i)
		require.NoError(t, b.Free(hs[i]))
	}
}
