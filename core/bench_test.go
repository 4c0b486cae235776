package core_test

import (
	"math/rand"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// benchBuffers opens a Backend on sim with n resident buffers of size bytes
// and one upload batch filling them.
func benchBuffers(b *testing.B, n, size int) (*core.Backend, []core.Buffer, []core.UploadAt) {
	be, _ := openSim(b, sim.Config{TotalMemory: 1 << 30})
	r := rand.New(rand.NewSource(1))
	bufs := make([]core.Buffer, n)
	ups := make([]core.UploadAt, n)
	for i := range bufs {
		h, err := be.Alloc(size)
		require.NoError(b, err)
		bufs[i] = h
		ups[i] = core.UploadAt{Buf: h, Data: randomBytes(r, size)}
	}
	require.NoError(b, be.Upload(ups...)) // warms the staging and stream pools
	return be, bufs, ups
}

// BenchmarkUpload is workload W1 on sim: 1024 x 4 KiB uploads
// into 1024 resident buffers, one call.
func BenchmarkUpload(b *testing.B) {
	be, _, ups := benchBuffers(b, 1024, 4<<10)
	b.SetBytes(1024 * 4 << 10)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := be.Upload(ups...); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDownloadMany is workload W3 on sim: 1024 x 4 KiB
// readbacks from 1024 resident buffers into fresh slices, one call.
func BenchmarkDownloadMany(b *testing.B) {
	be, bufs, _ := benchBuffers(b, 1024, 4<<10)
	rs := allOf(bufs)
	b.SetBytes(1024 * 4 << 10)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := be.DownloadMany(rs, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDownloadManyInto is W3 into reused caller slots.
func BenchmarkDownloadManyInto(b *testing.B) {
	be, bufs, _ := benchBuffers(b, 1024, 4<<10)
	rs := allOf(bufs)
	dst, err := be.DownloadMany(rs, nil)
	require.NoError(b, err)
	b.SetBytes(1024 * 4 << 10)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if dst, err = be.DownloadMany(rs, dst); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAllocateFree is workload W4 on sim: a pooled 4 KiB
// resident allocation and its free (a device pool hit after the first).
func BenchmarkAllocateFree(b *testing.B) {
	be, _ := openSim(b, sim.Config{TotalMemory: 1 << 30})
	b.ReportAllocs()
	for range b.N {
		h, err := be.Alloc(4 << 10)
		if err != nil {
			b.Fatal(err)
		}
		if err := be.Free(h); err != nil {
			b.Fatal(err)
		}
	}
}
