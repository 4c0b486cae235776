//go:build gpu

// Benchmarks of a Backend over the real driver, named after the workloads in
// docs/ARCHITECTURE.md (W1..W6). Run on a GPU machine:
//
//	.gpu/core.test -test.run '^$' -test.bench GPU -test.benchtime 20x

package core_test

import (
	"testing"

	"github.com/vyre-go/vyrecuda/core"
)

func openBench(b *testing.B) *core.Backend {
	b.Helper()
	be, err := core.OpenCUDA(0)
	if err != nil {
		b.Fatalf("OpenCUDA: %v", err)
	}
	b.Cleanup(func() {
		if err := be.Close(); err != nil {
			b.Errorf("Close: %v", err)
		}
	})
	return be
}

// W1: upload 1024 x 4 KiB into 1024 resident buffers, one call.
func BenchmarkGPUW1UploadMany1024x4KiB(b *testing.B) {
	be := openBench(b)
	_, ups := xferBuffers(b, be, 1024, 4096)
	b.SetBytes(1024 * 4096)
	b.ResetTimer()
	for range b.N {
		if err := be.Upload(ups...); err != nil {
			b.Fatal(err)
		}
	}
}

// W3: read the same 1024 x 4 KiB back, into new slices and into reused ones.
func BenchmarkGPUW3DownloadMany1024x4KiB(b *testing.B) {
	be := openBench(b)
	bufs, _ := xferBuffers(b, be, 1024, 4096)
	rs := allOf(bufs)
	b.Run("Many", func(b *testing.B) {
		b.SetBytes(1024 * 4096)
		for range b.N {
			if _, err := be.DownloadMany(rs, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ManyInto", func(b *testing.B) {
		dst, err := be.DownloadMany(rs, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(1024 * 4096)
		b.ResetTimer()
		for range b.N {
			if dst, err = be.DownloadMany(rs, dst); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// W2: upload 256 MiB from a Go slice.
func BenchmarkGPUW2Upload256MiB(b *testing.B) {
	be := openBench(b)
	_, ups := xferBuffers(b, be, 1, 256<<20)
	b.SetBytes(256 << 20)
	b.ResetTimer()
	for range b.N {
		if err := be.Upload(core.UploadAt{Buf: ups[0].Buf, Data: ups[0].Data}); err != nil {
			b.Fatal(err)
		}
	}
}

// W6: download 256 MiB into a reused Go slice.
func BenchmarkGPUW6Download256MiB(b *testing.B) {
	be := openBench(b)
	bufs, _ := xferBuffers(b, be, 1, 256<<20)
	dst, err := be.Download(bufs[0].All(), nil) // warms the staging pool
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(256 << 20)
	b.ResetTimer()
	for range b.N {
		if dst, err = be.Download(bufs[0].All(), dst); err != nil {
			b.Fatal(err)
		}
	}
}

// W4: Alloc + Free through the Backend (no optimizer):
// pooled sizes hit the device pool, larger ones go to cuMemAlloc/cuMemFree.
func BenchmarkGPUW4AllocFree(b *testing.B) {
	be := openBench(b)
	for _, c := range []struct {
		name string
		n    int
	}{{"4KiB-pooled", 4096}, {"1MiB-pooled", 1 << 20}, {"16MiB-direct", 16 << 20}} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				h, err := be.Alloc(c.n)
				if err != nil {
					b.Fatal(err)
				}
				if err := be.Free(h); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
