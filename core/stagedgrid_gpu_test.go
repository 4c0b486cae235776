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

	"github.com/vyre-go/vyrecuda/xferplan"
)

// stagedVariant runs one staged transfer with a forced plan.
type stagedVariant func(be *Backend, t *transferTuning, pl *xferplan.Plan, up bool, dev uint64, host []byte) error

var stagedVariants = []struct {
	name string
	run  stagedVariant
}{
	{"stream", func(be *Backend, t *transferTuning, pl *xferplan.Plan, up bool, dev uint64, host []byte) error {
		if up {
			return be.uploadPipelined("grid", t, pl, nil, dev, host, 1)
		}
		return be.downloadPipelined("grid", t, pl, nil, host, dev)
	}},
	{"barrier", func(be *Backend, t *transferTuning, pl *xferplan.Plan, up bool, dev uint64, host []byte) error {
		if up {
			return be.uploadBarrier("grid", t, pl, nil, dev, host, 1)
		}
		return be.downloadBarrier("grid", t, pl, nil, host, dev)
	}},
}

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
					for bi, blocks := range []int{min(2, k), min(3, k), k} {
						if (bi == 1 && blocks == min(2, k)) || (bi == 2 && blocks <= 3) {
							continue // counted already
						}
						chunk := int64((n + k - 1) / k)
						pl := xferplan.Plan{Kind: xferplan.Staged, Workers: w, Chunk: chunk, Chunks: k, Blocks: min(blocks, k), Parts: 1}
						for _, v := range stagedVariants {
							if v.name == "barrier" && (w == 1 || blocks > 3) {
								continue
							}
							b.Run(fmt.Sprintf("%s/%s/%dKiB/chunks=%d/w=%d/blocks=%d", v.name, dir, n>>10, k, w, blocks), func(b *testing.B) {
								b.SetBytes(int64(n))
								for range b.N {
									if err := v.run(be, &t, &pl, dir == "up", ptr, data[:n]); err != nil {
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
}

// BenchmarkGPUChunkedDMA moves n bytes of pinned memory in k DMAs queued
// round-robin on s streams, fenced once at the end: what splitting costs
// the DMA engine alone.
func BenchmarkGPUChunkedDMA(b *testing.B) {
	be := openCostModelGPU(b)
	const op = "chunkdma"
	st := newStaging(be.hostPool)
	defer st.release()
	stage, err := st.take(op, 16<<20)
	if err != nil {
		b.Fatal(err)
	}
	ptr, err := be.drv.MemAlloc(16 << 20)
	if err != nil {
		b.Fatal(err)
	}
	defer be.drv.MemFree(ptr)
	leases := make([]*launchLease, 3)
	for i := range leases {
		if leases[i], err = be.lease(op, false); err != nil {
			b.Fatal(err)
		}
		defer be.launch.giveBack(leases[i], true)
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

// uploadBarrier (the earlier design, kept here to compare) copies data to device address dst in the plan's chunks:
// chunk i is copied into staging block i%k by pl.Workers goroutines and queued on
// that block's stream, so it moves while chunk i+1 is being copied; a block
// is refilled only after its stream finished the previous chunk.
//
// Telemetry counts each stream synchronization (k-1 reuse waits per round
// of blocks, plus one per stream at the end) as a sync point and each
// chunk as a device copy.
func (b *Backend) uploadBarrier(op string, t *transferTuning, pl *xferplan.Plan, ents []*residentEntry, dst uint64, data []byte, requested int) error {
	n := len(data)
	chunks := pl.Chunks
	k := max(min(pl.Blocks, chunks), 1)
	p, err := b.newPipeline(op, ents, k, int(pl.Chunk))
	if err != nil {
		return err
	}
	for i := range chunks {
		j := i % k
		if i >= k {
			if err := p.wait(j); err != nil {
				return p.fail(err)
			}
		}
		lo, hi := int(pl.Bounds(i, int64(n))), int(pl.Bounds(i+1, int64(n)))
		blk := p.blocks[j][: hi-lo : hi-lo]
		parallelCopy(blk, data[lo:hi], pl.Workers, t.pipeLinger)
		if err := b.drv.MemcpyHtoDAsync(dst+uint64(lo), blk, p.leases[j].Stream); err != nil {
			return p.fail(driverError(op, "MemcpyHtoDAsync", err))
		}
	}
	for j := range k {
		if err := p.wait(j); err != nil {
			return p.fail(err)
		}
	}
	syncs := p.syncs
	p.finish(true)
	b.tel.syncPoints.Add(syncs)
	b.tel.h2dBytes.Add(uint64(n))
	b.tel.uploadOps.Add(1)
	b.tel.requested.Add(uint64(requested))
	b.tel.deviceCopies.Add(uint64(chunks))
	return nil
}

// downloadBarrier (the earlier design) copies len(out) bytes from device address src into out
// in chunks: the DMAs of up to k chunks are queued ahead into the staging
// blocks, and while goroutines copy chunk i out of its block the DMAs of
// the chunks after it run; the block is then refilled with chunk i+k.
//
// out is written chunk by chunk as the data arrives: a driver failure after
// the first chunk leaves a prefix of out holding device bytes (callers
// reusing caller storage document this). Telemetry counts each stream
// synchronization as a sync point and each chunk as a device copy.
func (b *Backend) downloadBarrier(op string, t *transferTuning, pl *xferplan.Plan, ents []*residentEntry, out []byte, src uint64) error {
	n := len(out)
	chunks := pl.Chunks
	k := max(min(pl.Blocks, chunks), 1)
	p, err := b.newPipeline(op, ents, k, int(pl.Chunk))
	if err != nil {
		return err
	}
	bound := func(i int) int { return int(pl.Bounds(i, int64(n))) }
	queue := func(i int) error {
		lo, hi := bound(i), bound(i+1)
		j := i % k
		if err := b.drv.MemcpyDtoHAsync(p.blocks[j][:hi-lo:hi-lo], src+uint64(lo), p.leases[j].Stream); err != nil {
			return driverError(op, "MemcpyDtoHAsync", err)
		}
		return nil
	}
	for i := range k {
		if err := queue(i); err != nil {
			return p.fail(err)
		}
	}
	for i := range chunks {
		j := i % k
		if err := p.wait(j); err != nil {
			return p.fail(err)
		}
		lo, hi := bound(i), bound(i+1)
		parallelCopy(out[lo:hi], p.blocks[j][:hi-lo], pl.Workers, t.pipeLinger)
		if i+k < chunks {
			if err := queue(i + k); err != nil {
				return p.fail(err)
			}
		}
	}
	syncs := p.syncs
	p.finish(true)
	b.tel.syncPoints.Add(syncs)
	b.tel.d2hBytes.Add(uint64(n))
	b.tel.readbackOps.Add(1)
	b.tel.requested.Add(1)
	b.tel.deviceCopies.Add(uint64(chunks))
	return nil
}
