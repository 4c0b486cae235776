//go:build gpu

// Measures the DMA of one transfer split into chunks on one or several
// streams without any host copy (core/internal/transfer's
// BenchmarkGPUStagedGrid measures staged transfers at forced chunkings).
// Run on a GPU machine:
//
//	.gpu/core.test -test.run '^$' -test.bench GPUChunkedDMA -test.benchtime 30x

package core

import (
	"fmt"
	"testing"

	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
	"github.com/vyre-go/vyrecuda/core/internal/streams"
)

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
