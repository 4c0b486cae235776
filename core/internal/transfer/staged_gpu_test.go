//go:build gpu

// Measures staged transfers on a real GPU at forced chunkings, so the
// planner's model can be checked against the plans it did not pick. Run
// on a GPU machine:
//
//	.gpu/transfer.test -test.run '^$' -test.bench GPUStagedGrid -test.benchtime 30x

package transfer

import (
	"fmt"
	"testing"

	"github.com/vyre-go/vyrecuda/core/cuda"
	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/devmem"
	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
	"github.com/vyre-go/vyrecuda/core/internal/stats"
	"github.com/vyre-go/vyrecuda/core/internal/streams"
	"github.com/vyre-go/vyrecuda/xferplan"
)

// openGPUEngine returns an Engine over device 0 with pools of its own, as
// core builds one (no packed kernels, no buffers to hold), closed at
// cleanup.
func openGPUEngine(b *testing.B) (*Engine[struct{}], driver.Driver) {
	b.Helper()
	drv, err := cuda.New(0)
	if err != nil {
		b.Fatalf("cuda.New: %v", err)
	}
	info, err := drv.Info()
	if err != nil {
		b.Fatal(err)
	}
	host := hostmem.New(drv, hostmem.Config{Cap: 1 << 30, Helpers: EvictHelpers{}})
	dev := devmem.New(drv, devmem.Config{Total: info.TotalMemory, MaxCached: 1 << 30, MaxClassed: 64 << 20})
	launch := streams.NewPool(drv, nil, streams.DefaultMaxIdle)
	var tel stats.Counters
	var pinned hostmem.Registry
	e := New(Config[struct{}]{Driver: drv, Host: host, Dev: dev, Launch: launch, Counters: &tel, Pinned: &pinned,
		Kernel: func(op string, _ Kernel) (driver.Function, error) {
			b.Fatalf("%s: the staged grid launches no kernel", op)
			return 0, nil
		},
		HoldBuffers: func(items []streams.Item, _ string, _ []struct{}) []streams.Item { return items }})
	b.Cleanup(func() {
		for _, err := range []error{launch.Close(), dev.Close(), host.Close(), drv.Close()} {
			if err != nil {
				b.Error(err)
			}
		}
	})
	return e, drv
}

// BenchmarkGPUStagedGrid runs staged transfers of 256 KiB to 16 MiB at
// every chunk count, goroutine count and block count of a small grid.
func BenchmarkGPUStagedGrid(b *testing.B) {
	e, drv := openGPUEngine(b)
	t := e.Tuning()
	const maxN = 16 << 20
	ptr, err := drv.MemAlloc(maxN)
	if err != nil {
		b.Fatal(err)
	}
	defer drv.MemFree(ptr)
	data := make([]byte, maxN)
	for i := range data {
		data[i] = byte(i * 7)
	}
	for _, n := range []int{256 << 10, 1 << 20, 4 << 20, 16 << 20} {
		for _, dir := range []string{"up", "down"} {
			for _, k := range []int{1, 2, 4, 8} {
				for _, w := range []int{1, 4, 8, 16} {
					for _, blocks := range gridBlocks(k) {
						pl := xferplan.Plan{Kind: xferplan.Staged, Workers: w, Chunk: int64((n + k - 1) / k), Chunks: k, Blocks: blocks, Parts: 1}
						b.Run(fmt.Sprintf("stream/%s/%dKiB/chunks=%d/w=%d/blocks=%d", dir, n>>10, k, w, blocks), func(b *testing.B) {
							b.SetBytes(int64(n))
							for range b.N {
								var err error
								if dir == "up" {
									err = e.uploadPipelined("grid", &t, &pl, nil, ptr, data[:n], 1)
								} else {
									err = e.downloadPipelined("grid", &t, &pl, nil, data[:n], ptr)
								}
								if err != nil {
									b.Fatal(err)
								}
							}
						})
					}
				}
			}
		}
	}
}

// gridBlocks is the block counts the grid tries for k chunks: 2, 3 and k,
// each at most k, without repeats.
func gridBlocks(k int) []int {
	out := []int{min(2, k)}
	for _, v := range []int{3, k} {
		if v <= k && v != out[len(out)-1] {
			out = append(out, v)
		}
	}
	return out
}
