//go:build gpu

// Benchmarks of the real driver on its own. Run on a GPU machine:
//
//	.gpu/core_cuda.test -test.run '^$' -test.bench GPU

package cuda_test

import (
	"runtime"
	"testing"

	"github.com/vyre-go/vyrecuda/core/cuda"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// BenchmarkGPUCallOverhead measures what making the context current costs:
// a cheap driver call (cuStreamQuery on an idle stream) made raw on a
// thread that already has the context, the bare cuCtxSetCurrent, and the
// same query through the adapter, which locks the thread and sets the
// context around it.
func BenchmarkGPUCallOverhead(b *testing.B) {
	drv, err := cuda.New(0)
	if err != nil {
		b.Fatal(err)
	}
	defer drv.Close()
	s, err := drv.StreamCreate()
	if err != nil {
		b.Fatal(err)
	}
	defer drv.StreamDestroy(s)
	dev, err := cudaapi.DeviceGet(0)
	if err != nil {
		b.Fatal(err)
	}
	ctx, err := cudaapi.DevicePrimaryCtxRetain(dev)
	if err != nil {
		b.Fatal(err)
	}
	defer cudaapi.DevicePrimaryCtxRelease(dev)

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
