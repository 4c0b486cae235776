//go:build gpu

// Measures the constants of xferplan's cost model on a real GPU: the host
// copy rate into pinned staging by goroutine count, the DMA by size and
// direction, and the host cost of one queued copy. Run on a GPU machine:
//
//	.gpu/core.test -test.run '^$' -test.bench GPUCostModel -test.benchtime 20x

package core

import (
	"fmt"
	"testing"
	"time"

	"github.com/vyre-go/vyrecuda/core/internal/copyjob"
	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
	"github.com/vyre-go/vyrecuda/core/internal/transfer"
)

func openCostModelGPU(b *testing.B) *Backend {
	b.Helper()
	be, err := OpenCUDA(0)
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

func BenchmarkGPUCostModel(b *testing.B) {
	be := openCostModelGPU(b)
	const op = "costmodel"
	sizes := []int{64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20}
	st := hostmem.NewStaging(be.hostPool)
	defer st.ReturnAll()
	stage, err := st.Slice(op, 64<<20)
	if err != nil {
		b.Fatal(err)
	}
	src := make([]byte, 64<<20)
	for i := range src {
		src[i] = byte(i)
	}
	// The copy into staging as uploads make it (non-temporal stores) and
	// with cached stores (StagingCache.CachedUploadStores).
	tunings := map[string]*transfer.Tuning{"copy": {}, "copy-cached": {PlainStage: true}}
	for _, mode := range []string{"copy", "copy-cached"} {
		for _, w := range []int{1, 2, 4, 8, 16} {
			for _, n := range []int{256 << 10, 1 << 20, 8 << 20} {
				b.Run(fmt.Sprintf("%s/workers=%d/%dKiB", mode, w, n>>10), func(b *testing.B) {
					b.SetBytes(int64(n))
					for range b.N {
						copyjob.ParallelCopy(stage[:n], src[:n], w, DefaultCopyHelperLinger, tunings[mode].StageInFenced)
					}
				})
			}
		}
	}
	ptr, err := be.drv.MemAlloc(64 << 20)
	if err != nil {
		b.Fatal(err)
	}
	defer be.drv.MemFree(ptr)
	lease, err := be.launch.Lease(op, false)
	if err != nil {
		b.Fatal(err)
	}
	defer be.launch.Return(lease, true)
	s := lease.Stream
	for _, n := range sizes {
		for _, dir := range []string{"h2d", "d2h"} {
			b.Run(fmt.Sprintf("dma/%s/%dKiB", dir, n>>10), func(b *testing.B) {
				b.SetBytes(int64(n))
				for range b.N {
					var err error
					if dir == "h2d" {
						err = be.drv.MemcpyHtoDAsync(ptr, stage[:n], s)
					} else {
						err = be.drv.MemcpyDtoHAsync(stage[:n], ptr, s)
					}
					if err == nil {
						err = be.drv.StreamSynchronize(s)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
	b.Run("queue/htod-4KiB-x256", func(b *testing.B) {
		var queued time.Duration
		for range b.N {
			start := time.Now()
			for k := range 256 {
				if err := be.drv.MemcpyHtoDAsync(ptr+uint64(k)<<12, stage[k<<12:(k+1)<<12], s); err != nil {
					b.Fatal(err)
				}
			}
			queued += time.Since(start)
			if err := be.drv.StreamSynchronize(s); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(queued.Nanoseconds())/float64(b.N*256), "ns/queued-copy")
	})
	b.Run("wait/idle-stream", func(b *testing.B) {
		for range b.N {
			if err := be.drv.StreamSynchronize(s); err != nil {
				b.Fatal(err)
			}
		}
	})
}
