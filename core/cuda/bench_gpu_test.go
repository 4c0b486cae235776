//go:build gpu

// Benchmarks of the real driver on its own. Run on a GPU machine:
//
//	.gpu/core_cuda.test -test.run '^$' -test.bench GPU

package cuda_test

import (
	"fmt"
	"runtime"
	"testing"
	"unsafe"

	"github.com/vyre-go/vyrecuda/core/cuda"
	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// benchDriver opens the adapter on device 0 with one stream, and retains
// the device's primary context for raw calls; all go at cleanup.
func benchDriver(b *testing.B) (*cuda.Driver, driver.Stream, cudaapi.Context) {
	drv, err := cuda.New(0)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { drv.Close() })
	s, err := drv.StreamCreate()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { drv.StreamDestroy(s) })
	dev, err := cudaapi.DeviceGet(0)
	if err != nil {
		b.Fatal(err)
	}
	ctx, err := cudaapi.DevicePrimaryCtxRetain(dev)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cudaapi.DevicePrimaryCtxRelease(dev) })
	return drv, s, ctx
}

// BenchmarkGPUCallOverhead measures what making the context current costs:
// a cheap driver call (cuStreamQuery on an idle stream) made raw on a
// thread that already has the context, the bare cuCtxSetCurrent, and the
// same query through the adapter, which locks the thread and sets the
// context around it.
func BenchmarkGPUCallOverhead(b *testing.B) {
	drv, s, ctx := benchDriver(b)

	b.Run("raw-StreamQuery", func(b *testing.B) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cudaapi.CtxSetCurrent(ctx); err != nil {
			b.Fatal(err)
		}
		for range b.N {
			if err := cudaapi.StreamQuery(cudaapi.Stream(s)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("raw-CtxSetCurrent", func(b *testing.B) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for range b.N {
			if err := cudaapi.CtxSetCurrent(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("raw-CtxGetCurrent", func(b *testing.B) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for range b.N {
			if _, err := cudaapi.CtxGetCurrent(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("raw-Set+StreamQuery", func(b *testing.B) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for range b.N {
			if err := cudaapi.CtxSetCurrent(ctx); err != nil {
				b.Fatal(err)
			}
			if err := cudaapi.StreamQuery(cudaapi.Stream(s)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("adapter-StreamQuery", func(b *testing.B) {
		for range b.N {
			if _, err := drv.StreamQuery(s); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("adapter-StreamQuery-16goroutines", func(b *testing.B) {
		b.SetParallelism(max(1, 16/runtime.GOMAXPROCS(0)))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := drv.StreamQuery(s); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

// BenchmarkGPUSmallUpload takes apart an upload of 4 and 16 KiB from
// ordinary Go memory: the driver's synchronous cuMemcpyHtoD alone, and
// followed by cuCtxSynchronize (does the synchronous copy wait for its DMA
// to land?); cuMemcpyHtoDAsync on a non-blocking stream alone (what the
// caller waits for until the driver has read the bytes), with
// cuStreamSynchronize, and through the adapter with its completion-mark
// fence (what a fenced upload costs at the driver seam).
func BenchmarkGPUSmallUpload(b *testing.B) {
	drv, s, ctx := benchDriver(b)
	const most = 16 << 10
	d, err := drv.MemAlloc(most)
	if err != nil {
		b.Fatal(err)
	}
	defer drv.MemFree(d)
	src := make([]byte, most)
	raw := func(b *testing.B, body func(n int) error) {
		for _, n := range []int{4 << 10, 16 << 10} {
			b.Run(fmt.Sprintf("%dKiB", n>>10), func(b *testing.B) {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				if err := cudaapi.CtxSetCurrent(ctx); err != nil {
					b.Fatal(err)
				}
				for range b.N {
					if err := body(n); err != nil {
						b.Fatal(err)
					}
				}
				if err := cudaapi.CtxSynchronize(); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
	p := unsafe.Pointer(&src[0])
	b.Run("MemcpyHtoD", func(b *testing.B) {
		raw(b, func(n int) error { return cudaapi.MemcpyHtoD(cudaapi.DevicePtr(d), p, uint64(n)) })
	})
	b.Run("MemcpyHtoD+CtxSynchronize", func(b *testing.B) {
		raw(b, func(n int) error {
			if err := cudaapi.MemcpyHtoD(cudaapi.DevicePtr(d), p, uint64(n)); err != nil {
				return err
			}
			return cudaapi.CtxSynchronize()
		})
	})
	b.Run("MemcpyHtoDAsync", func(b *testing.B) {
		raw(b, func(n int) error {
			return cudaapi.MemcpyHtoDAsync(cudaapi.DevicePtr(d), p, uint64(n), cudaapi.Stream(s))
		})
	})
	b.Run("MemcpyHtoDAsync+StreamSynchronize", func(b *testing.B) {
		raw(b, func(n int) error {
			if err := cudaapi.MemcpyHtoDAsync(cudaapi.DevicePtr(d), p, uint64(n), cudaapi.Stream(s)); err != nil {
				return err
			}
			return cudaapi.StreamSynchronize(cudaapi.Stream(s))
		})
	})
	for _, n := range []int{4 << 10, 16 << 10} {
		b.Run(fmt.Sprintf("adapter-inline+fence/%dKiB", n>>10), func(b *testing.B) {
			for range b.N {
				if err := drv.MemcpyHtoDInline(d, src[:n], s); err != nil {
					b.Fatal(err)
				}
				if err := drv.StreamSynchronize(s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
