package core

import (
	"runtime"
	"sync"
)

// Large transfers are pipelined: the bytes move in chunks through a few
// pinned staging blocks, and goroutines copy the next chunk between the
// caller's memory and staging while the DMA engine moves the previous one.
// On the reference H100 one thread copies into pinned memory at 8.6-9.7 GB/s
// and 16 threads at 43 GB/s, while the DMA itself runs at about 54 GB/s: a
// transfer staged whole and copied by one thread is bounded by the copy, a
// pipelined one by the slower of the parallel copy and the DMA.
const (
	// pipelineMinBytes is the smallest single transfer that is pipelined.
	// It is two chunks: below that there is nothing to overlap, and one
	// staging block with a parallel copy is as fast.
	pipelineMinBytes = 2 * pipelineChunkBytes
	// pipelineChunkBytes is the bytes per chunk. Pinned DMA reaches close to
	// its peak from a few MiB (37.5 GB/s at 1 MiB on the H100), so the
	// chunk size is about the host side: split over 16 goroutines each
	// copies 2 MiB, past the 1 MiB from which Go's memmove uses
	// non-temporal stores, so the destination is written without first
	// being read into the cache (the copy shares host memory bandwidth with
	// the DMA beside it). Measured on an H200 host (16 cores), 256 MiB:
	// 8 MiB chunks x 4 blocks 23.5 / 24.3 GB/s up / down, 16 MiB x 4 32.0 /
	// 27.4, 32 MiB x 3 32.9 / 32.9; staged whole with 16 goroutines 22 /
	// 21, with one 5.2 / 5.4.
	pipelineChunkBytes = 32 << 20
	// pipelineBlocks is the staging blocks (and streams) in rotation: with
	// two the copy of chunk i+1 waits for the DMA of chunk i-1 to end; three
	// absorb jitter in either without stalling the other, for 96 MiB of
	// pinned staging, within the pinned pool's default cap so the blocks
	// stay cached between calls.
	pipelineBlocks = 3
	// copyBytesPerWorker is the least host copying worth a goroutine:
	// starting and joining one costs about a microsecond, 256 KiB takes
	// about 25 us on one thread.
	copyBytesPerWorker = 256 << 10
	// maxCopyWorkers bounds the copy goroutines of one call; memory
	// bandwidth is saturated well before this many cores (43 GB/s at 16
	// threads on the H100).
	maxCopyWorkers = 16
)

// transferTuning holds the thresholds that choose between the per-copy,
// packed and pipelined transfer paths. Its zero value means the defaults;
// tests shrink the sizes (export_transfer_test.go) so the simulated device
// runs every path at small sizes, or switch a path off with a negative
// value.
type transferTuning struct {
	packMinCopies    int // fused copies from which a batch is packed; < 0: never
	packMaxMeanBytes int // largest mean fused copy that is packed
	packMaxBytes     int // largest packed block (data, padding and table)
	pipelineMin      int // bytes from which a single transfer is pipelined; < 0: never
	chunk            int // pipeline chunk bytes
	blocks           int // pipeline staging blocks
	workers          int // most copy goroutines
	perWorker        int // least bytes per copy goroutine
	packParts        int // DMAs the data of a packed upload is split into
}

// tuning returns the Backend's transfer tuning with defaults filled in.
func (b *Backend) tuning() transferTuning {
	t := b.cfg.xfer
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&t.packMinCopies, packMinCopies)
	def(&t.packMaxMeanBytes, packMaxMeanBytes)
	def(&t.packMaxBytes, packMaxBytes)
	def(&t.pipelineMin, pipelineMinBytes)
	def(&t.chunk, pipelineChunkBytes)
	def(&t.blocks, pipelineBlocks)
	def(&t.workers, min(runtime.GOMAXPROCS(0), maxCopyWorkers))
	def(&t.perWorker, copyBytesPerWorker)
	def(&t.packParts, packParts)
	return t
}

// pipelines reports whether one transfer of n bytes is pipelined.
func (t *transferTuning) pipelines(n uint64) bool {
	return t.pipelineMin >= 0 && n >= uint64(t.pipelineMin)
}

// copyWorkers returns how many goroutines copy n bytes of host memory.
func (t *transferTuning) copyWorkers(n int) int {
	return max(min(t.workers, n/t.perWorker), 1)
}

// parallelCopy copies src into dst (of equal length) with w goroutines, the
// calling one among them.
func parallelCopy(dst, src []byte, w int) {
	n := len(src)
	if w <= 1 || n < 2 {
		copy(dst, src)
		return
	}
	part := (n + w - 1) / w
	part = (part + 63) &^ 63 // whole cache lines per worker
	var wg sync.WaitGroup
	for lo := part; lo < n; lo += part {
		hi := min(lo+part, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			copy(dst[lo:hi], src[lo:hi])
		}()
	}
	copy(dst[:min(part, n)], src[:min(part, n)])
	wg.Wait()
}

// forParts splits items [0, n) into at most w contiguous parts of about equal
// weight and runs f on each, the first on the calling goroutine. start(i) is
// the cumulative weight before item i (non-decreasing, start(0) == 0) and
// total the weight of all items.
func forParts(n, w int, start func(i int) int, total int, f func(lo, hi int)) {
	if w <= 1 || n < 2 {
		f(0, n)
		return
	}
	w = min(w, n)
	var wg sync.WaitGroup
	lo := 0
	first := -1
	for k := 1; k <= w && lo < n; k++ {
		hi := n
		if k < w {
			// The first item whose start reaches this part's share of the weight.
			goal := total / w * k
			a, z := lo+1, n
			for a < z {
				m := int(uint(a+z) >> 1)
				if start(m) < goal {
					a = m + 1
				} else {
					z = m
				}
			}
			hi = a
		}
		if first < 0 {
			first = hi
		} else {
			wg.Add(1)
			go func(lo, hi int) {
				defer wg.Done()
				f(lo, hi)
			}(lo, hi)
		}
		lo = hi
	}
	f(0, first)
	wg.Wait()
}

// pipeline is the staging blocks and streams of one pipelined transfer.
type pipeline struct {
	b      *Backend
	op     string
	st     staging
	blocks [][]byte
	leases []*launchLease
	syncs  uint64 // stream synchronizations that succeeded
}

// newPipeline takes k staging blocks of chunk bytes and k leased streams,
// all or nothing.
func (b *Backend) newPipeline(op string, k, chunk int) (*pipeline, error) {
	p := &pipeline{b: b, op: op, st: newStaging(b.hostPool)}
	p.blocks = make([][]byte, k)
	for j := range p.blocks {
		blk, err := p.st.take(op, chunk)
		if err != nil {
			p.st.release()
			return nil, err
		}
		p.blocks[j] = blk
	}
	p.leases = make([]*launchLease, 0, k)
	for range k {
		l, err := b.launch.lease(op, false)
		if err != nil {
			p.finish(true)
			return nil, err
		}
		p.leases = append(p.leases, l)
	}
	return p, nil
}

// wait blocks until the work queued on block j's stream has completed.
func (p *pipeline) wait(j int) error {
	if err := p.b.drv.StreamSynchronize(p.leases[j].Stream); err != nil {
		return driverError(p.op, "StreamSynchronize", err)
	}
	p.syncs++
	return nil
}

// fail drains every stream so no queued copy still uses the staging, gives
// everything back and returns err.
func (p *pipeline) fail(err error) error {
	for _, l := range p.leases {
		p.b.launch.giveBack(l, p.b.drain(p.op, l.Stream))
	}
	p.leases = nil
	p.st.release()
	return err
}

// finish gives the streams back (healthy or not) and the staging blocks to
// their pool. Every stream must be idle.
func (p *pipeline) finish(healthy bool) {
	for _, l := range p.leases {
		p.b.launch.giveBack(l, healthy)
	}
	p.leases = nil
	p.st.release()
}

// uploadPipelined copies data to device address dst in chunks: chunk i is
// copied into staging block i%k by up to t.workers goroutines and queued on
// that block's stream, so it moves while chunk i+1 is being copied; a block
// is refilled only after its stream finished the previous chunk.
//
// Telemetry counts each stream synchronization (k-1 reuse waits per round
// of blocks, plus one per stream at the end) as a sync point and each
// chunk as a device copy.
func (b *Backend) uploadPipelined(op string, t *transferTuning, dst uint64, data []byte, requested int) error {
	n := len(data)
	chunks := (n + t.chunk - 1) / t.chunk
	k := min(t.blocks, chunks)
	p, err := b.newPipeline(op, k, t.chunk)
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
		lo := i * t.chunk
		hi := min(lo+t.chunk, n)
		blk := p.blocks[j][: hi-lo : hi-lo]
		parallelCopy(blk, data[lo:hi], t.copyWorkers(hi-lo))
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

// downloadPipelined copies len(out) bytes from device address src into out
// in chunks: the DMAs of up to k chunks are queued ahead into the staging
// blocks, and while goroutines copy chunk i out of its block the DMAs of
// the chunks after it run; the block is then refilled with chunk i+k.
//
// out is written chunk by chunk as the data arrives: a driver failure after
// the first chunk leaves a prefix of out holding device bytes (callers
// reusing caller storage document this). Telemetry counts each stream
// synchronization as a sync point and each chunk as a device copy.
func (b *Backend) downloadPipelined(op string, t *transferTuning, out []byte, src uint64) error {
	n := len(out)
	chunks := (n + t.chunk - 1) / t.chunk
	k := min(t.blocks, chunks)
	p, err := b.newPipeline(op, k, t.chunk)
	if err != nil {
		return err
	}
	queue := func(i int) error {
		lo := i * t.chunk
		hi := min(lo+t.chunk, n)
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
		lo := i * t.chunk
		hi := min(lo+t.chunk, n)
		parallelCopy(out[lo:hi], p.blocks[j][:hi-lo], t.copyWorkers(hi-lo))
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
