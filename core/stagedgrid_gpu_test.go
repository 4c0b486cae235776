//go:build gpu

// Measures staged transfers on a real GPU at forced chunkings, so the
// planner's model can be checked against the plans it did not pick, and
// the DMA of one transfer split into chunks on one or several streams
// without any host copy. Run on a GPU machine:
//
//	.gpu/core.test -test.run '^$' -test.bench 'GPUStagedGrid|GPUChunkedDMA' -test.benchtime 30x

package core

import (
	"fmt"
	"testing"

	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
	"github.com/vyre-go/vyrecuda/core/internal/streams"
	"github.com/vyre-go/vyrecuda/xferplan"
)

// BenchmarkGPUStagedGrid runs staged transfers of 256 KiB to 16 MiB at
// every chunk count, goroutine count and block count of a small grid.
func BenchmarkGPUStagedGrid(b *testing.B) {
	be := openCostModelGPU(b)
	t := be.tuning()
	const maxN = 16 << 20
	ptr, err := be.drv.MemAlloc(maxN)
	if err != nil {
		b.Fatal(err)
	}
	defer be.drv.MemFree(ptr)
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
									err = be.uploadPipelined("grid", &t, &pl, nil, ptr, data[:n], 1)
								} else {
									err = be.downloadPipelined("grid", &t, &pl, nil, data[:n], ptr)
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

// BenchmarkGPUChunkedDMA moves n bytes of pinned memory in k DMAs queued
// round-robin on s streams, fenced once at the end: what splitting costs
// the DMA engine alone.
func BenchmarkGPUChunkedDMA(b *testing.B) {
	be := openCostModelGPU(b)
	const op = "chunkdma"
	st := hostmem.NewStaging(be.hostPool)
	defer st.ReturnAll()
	stage, err := st.Slice(op, 16<<20)
	if err != nil {
		b.Fatal(err)
	}
	ptr, err := be.drv.MemAlloc(16 << 20)
	if err != nil {
		b.Fatal(err)
	}
	defer be.drv.MemFree(ptr)
	leases := make([]*streams.Lease, 3)
	for i := range leases {
		if leases[i], err = be.launch.Lease(op, false); err != nil {
			b.Fatal(err)
		}
		defer be.launch.Return(leases[i], true)
	}
	for _, n := range []int{1 << 20, 4 << 20} {
		for _, dir := range []string{"h2d", "d2h"} {
			for _, k := range []int{1, 2, 4, 8, 16} {
				for _, s := range []int{1, 3} {
					b.Run(fmt.Sprintf("%s/%dKiB/chunks=%d/streams=%d", dir, n>>10, k, s), func(b *testing.B) {
						b.SetBytes(int64(n))
						c := n / k
						for range b.N {
							for i := range k {
								lo := i * c
								str := leases[i%s].Stream
								var err error
								if dir == "h2d" {
									err = be.drv.MemcpyHtoDAsync(ptr+uint64(lo), stage[lo:lo+c], str)
								} else {
									err = be.drv.MemcpyDtoHAsync(stage[lo:lo+c], ptr+uint64(lo), str)
								}
								if err != nil {
									b.Fatal(err)
								}
							}
							for j := range s {
								if err := be.drv.StreamSynchronize(leases[j].Stream); err != nil {
									b.Fatal(err)
								}
							}
						}
					})
				}
			}
		}
	}
}
