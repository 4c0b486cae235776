package xferplan

import (
	"math"
	"time"
)

// Link is one direction of the host<->device DMA path: a copy of n bytes
// from or into page-locked memory, fenced on its own, takes Latency plus
// n/PeakGBps. Copies queued behind one another on a stream hide all but the
// first one's latency.
type Link struct {
	Latency  time.Duration
	PeakGBps float64
	// Gap is what each further DMA queued behind another on one stream
	// costs beyond its bytes.
	Gap time.Duration
}

// dma is the time of one fenced copy of n bytes, in nanoseconds.
func (l Link) dma(n float64) float64 { return float64(l.Latency) + l.stream(n) }

// stream is the time of a copy of n bytes queued behind another one.
func (l Link) stream(n float64) float64 {
	if l.PeakGBps <= 0 {
		return math.Inf(1)
	}
	return n / l.PeakGBps // bytes / (bytes per ns)
}

// CopyRate is the rate of a host memcpy from ordinary memory into
// page-locked memory (or back) on Threads goroutines at once.
type CopyRate struct {
	Threads int
	GBps    float64
}

// Model predicts the time of each way of moving a transfer. Its constants
// come from measurements on the reference machine (see Reference); every
// plan the library makes is the cheapest candidate under it.
type Model struct {
	// H2D and D2H are the DMA links.
	H2D, D2H Link
	// Copy is the host copy rate by thread count, in increasing thread
	// order; rates between two points are interpolated, beyond the last
	// the last holds.
	Copy []CopyRate
	// CacheBytes and CacheGBps: copies of up to CacheBytes run at
	// CacheGBps, the rate of one goroutine when source and destination
	// stay in the processor's caches (the source was just written, the
	// staging block was just used); helpers do not speed them up.
	CacheBytes int64
	CacheGBps  float64
	// CopyJob is the cost, per helper goroutine, of sharing one copy job
	// with helpers and waiting for the last of them.
	CopyJob time.Duration
	// DriverCopy is the host cost of queueing one asynchronous copy.
	DriverCopy time.Duration
	// Wait is the host cost of one stream synchronization beyond the work
	// it waits for.
	Wait time.Duration
	// EventLag is how much later polling an event recorded behind a DMA
	// reports it landed than a stream synchronization does: a plan that
	// ends on such an event (a staged readback, a packed readback in
	// parts) pays it once.
	EventLag time.Duration
	// Launch is the host cost of queueing one kernel launch.
	Launch time.Duration
	// KernelGBps is the rate at which the scatter and gather kernels move
	// bytes between the packed block and the buffers on the device.
	KernelGBps float64
	// PackItem is the host cost per piece of a packed transfer beyond its
	// bytes (its table entry and its share of the split into tasks).
	PackItem time.Duration
	// DMASlowdown is how much an upload's DMAs slow, as a fraction per
	// GB/s by which the host copying that runs beside them (the copy of
	// later chunks or parts) outruns the link: the copying and the DMAs
	// share the host's memory bandwidth, so copying faster than the link
	// takes the data away only delays the DMAs.
	DMASlowdown float64
}

// Reference is the model measured on the reference machine: an NVIDIA
// H100 80GB HBM3 on a 16-core virtual machine, CUDA 13.0, driver 580
// (core's BenchmarkGPUCostModel and `vyrecuda bench`, this library's own
// copy helpers, helpers awake as they are between back-to-back calls):
//
//   - one DMA fenced alone, H2D: 6.51, 19.2, 37.1, 49.1 and 53.3 GB/s for
//     64 KiB, 256 KiB, 1, 4 and 16 MiB, which 8.6 us plus 54.7 GB/s
//     reproduces within 3%; D2H 7.09, 20.1, 38.2 and 49.3 GB/s for 64 KiB
//     to 4 MiB: 8.2 us plus 54.5 GB/s;
//   - a copy from ordinary Go memory into pinned memory, 8 MiB: 12.3,
//     23.6, 41.4, 55.4 and 71.5 GB/s on 1, 2, 4, 8 and 16 goroutines; one
//     goroutine copies 256 KiB to 1 MiB at 28.6-36 GB/s when source and
//     staging stay in the caches, and helpers made copies of 256 KiB
//     slower (8 goroutines: 13.7 GB/s);
//   - staged transfers with one copy job per call (core's
//     BenchmarkGPUStagedGrid): 1 MiB in 4 chunks took 94.6, 67.5 and
//     59.4 us on 4, 8 and 16 goroutines, 4 MiB in 8 chunks 255, 222 and
//     188 us, so more helpers never cost more than they gave: CopyJob is
//     0.2 us. Reusing staging blocks was costly: 16 MiB in 8 chunks took
//     613 us with a block per chunk, 789 with 3 blocks and 982 with 2
//     (1 MiB in 4 chunks: 59, 122, 118 us);
//   - queueing one asynchronous copy 1.65 us; synchronizing an idle stream
//     1.84 us; one kernel launch 3.7 us.
//
// The same host was much slower in some runs than in others (the copy
// rates above halved, pinned DMAs of 16 MiB at 24 GB/s), so figures are
// compared only within one run.
//
// Uploads now copy into staging with non-temporal stores (core's
// StagingCache). Alone, that copy ran at 11.5, 23.1, 57.7, 89.6 and 63.6
// GB/s for 8 MiB on 1, 2, 4, 8 and 16 goroutines (the built-in copy in the
// same run: 13.7, 44.8, 50.8, 55.3 and 88.1), within this host's noise of
// the rates above, and one goroutine copied 256 KiB to 1 MiB at 15-16 GB/s
// (built-in: 25-32); the DMA that follows is what gained (a 4 MiB upload
// 122-125 us against 181-227). The constants were left as they were then.
//
// CacheBytes was 512 KiB until stream waits polled completion marks (core/cuda's
// marks.go). In core's BenchmarkGPUSinglePhases a 256 KiB upload's
// staging copy then took 15.7-16.1 us on one goroutine and 5.2-5.7 us on 8,
// and a 256 KiB readback's copy out 10.2 us on one and 6.9-7.5 on 8, while
// at 64 KiB 2 goroutines gained 0.4 us at most (3.0-3.2 against 3.4-3.7):
// only copies up to 64 KiB stay on the caller.
//
// EventLag: in one C program on the same host, an event recorded right
// behind a pinned DMA (4 KiB to 1 MiB, either way) reported it done
// 2.23-2.30 us after a 32-bit write queued behind the same DMA had landed
// in host memory, and fencing the DMA by polling that write instead of
// cuStreamSynchronize ended it 0.8-0.9 us sooner from 64 KiB up (0.4-0.6
// us for a 4 KiB upload), queueing the write (1.4 us) included. Wait stays the cost of one synchronization, now the
// write's; Latency is still the older measurement's.
//
// DMASlowdown comes from W7's upload (2048 buffers, 52.9 MiB, packed in
// parts; `vyrecuda bench -workloads W7U -plan-workers N`, 50 runs each,
// the worker counts alternated three times in one command): 16 goroutines
// took 1.516, 1.557 and 1.600 ms, 12 took 1.474, 1.515 and 1.459, 8 took
// 1.447, 1.417 and 1.451, while the DMA of its bytes alone took 1.01-1.07
// ms. The DMAs ran at about 24 GB/s while 16 goroutines packed. Slowing
// the DMAs by 1% per GB/s of copying past the link, for as long as the
// copying lasts, reproduces most of the difference. In an A/B of the whole
// term (`-plan-dma-slowdown 0` against the default, alternated three
// times) it took W7U from 1.543-1.581 ms to 1.462-1.544, 64 MiB uploads
// from 38.5-39.9 to 41.1-43.4 GB/s and CPU time per GB of W7U from
// 376-393 to 273-301 ms, and left W1, 256 KiB to 16 MiB within noise.
//
// Gap, the cost of each further DMA queued behind another on one stream,
// is what BenchmarkGPUChunkedDMA showed on the same host: 1 MiB H2D in 1, 2,
// 4, 8 and 16 DMAs on one stream took 33.7, 32.5, 39.1, 48.9 and 73.6 us,
// 4 MiB 88, 91, 96, 107 and 193 us (D2H alike), about 2.5 us per DMA;
// spreading them over 3 streams was slower still.
func Reference() Model {
	return Model{
		H2D: Link{Latency: 8600 * time.Nanosecond, PeakGBps: 54.7, Gap: 2500 * time.Nanosecond},
		D2H: Link{Latency: 8200 * time.Nanosecond, PeakGBps: 54.5, Gap: 2500 * time.Nanosecond},
		Copy: []CopyRate{
			{Threads: 1, GBps: 12.3}, {Threads: 2, GBps: 23.6}, {Threads: 4, GBps: 41.4},
			{Threads: 8, GBps: 55.4}, {Threads: 16, GBps: 71.5},
		},
		CacheBytes:  64 << 10,
		CacheGBps:   28.6,
		CopyJob:     200 * time.Nanosecond,
		DriverCopy:  1650 * time.Nanosecond,
		Wait:        1840 * time.Nanosecond,
		EventLag:    2300 * time.Nanosecond,
		Launch:      3700 * time.Nanosecond,
		KernelGBps:  1000,
		PackItem:    40 * time.Nanosecond,
		DMASlowdown: 0.01,
	}
}

// slowedDMA is the time of an upload's DMAs that take dma at full speed
// when, for the first overlap of it, host copying outruns the link by
// excess GB/s (DMASlowdown).
func (m *Model) slowedDMA(dma, overlap, excess float64) float64 {
	if m.DMASlowdown <= 0 || excess <= 0 || overlap <= 0 {
		return dma
	}
	f := 1 + m.DMASlowdown*excess
	if dma*f <= overlap {
		return dma * f
	}
	return overlap + dma - overlap/f
}

// copyGBps is the host copy rate on w threads.
func (m *Model) copyGBps(w int) float64 {
	if len(m.Copy) == 0 {
		return 1
	}
	if w <= m.Copy[0].Threads {
		return m.Copy[0].GBps
	}
	for i := 1; i < len(m.Copy); i++ {
		lo, hi := m.Copy[i-1], m.Copy[i]
		if w <= hi.Threads && hi.Threads > lo.Threads {
			f := float64(w-lo.Threads) / float64(hi.Threads-lo.Threads)
			return lo.GBps + f*(hi.GBps-lo.GBps)
		}
	}
	return m.Copy[len(m.Copy)-1].GBps
}

// hostCopy is the time of copying n bytes on w goroutines, in nanoseconds.
func (m *Model) hostCopy(n float64, w int) float64 {
	r := m.copyGBps(w)
	if n <= float64(m.CacheBytes) {
		r = m.CacheGBps
	}
	if r <= 0 {
		return math.Inf(1)
	}
	return n/r + float64(w-1)*float64(m.CopyJob)
}

// link returns the DMA link of dir.
func (m *Model) link(dir Direction) Link {
	if dir == Readback {
		return m.D2H
	}
	return m.H2D
}

// stream is the time of a Staged transfer (or a packed one in k parts,
// with as many blocks): k chunks of c bytes (n in all)
// copied on w goroutines at r bytes per ns (copyGBps(w), computed once by
// the caller's search) that share one copy job for the whole call, each
// chunk's DMA queued on one stream as soon as its copy ends (uploads), or
// each chunk copied out as soon as its DMA has landed (readbacks), through
// blocks staging blocks. With two blocks or more the copies and the DMAs
// overlap: the call lasts as long as the slower side plus one chunk of the
// faster one. Per chunk the caller queues a DMA and records an event
// (2 DriverCopy), time taken from its share of the copying, and the call
// ends with one stream synchronization (Wait).
//
// A staged call (staged set) does less: an upload that gives every chunk a
// block of its own records no event (1 DriverCopy per chunk), and a staged
// readback ends when its last chunk's event says it landed, with no stream
// synchronization but the event's lag (EventLag). Before stream waits
// polled completion marks, charging nothing there made the model prefer
// staging at 256 KiB, where on the reference host (core's
// BenchmarkGPUSinglePhases, medians of 200 calls) the staged plan took
// 27.1 us against 31.9 us for the upload and 23.9 against 27.4 for the
// readback; with marks and helpers sharing copies above CacheBytes, one
// DMA took 20.5-22.8 us against 22.5-24.3 staged for the upload and
// 24.4-26.0 against 27.9-29.2 for the readback.
func (m *Model) stream(dir Direction, n float64, k int, c float64, w, blocks int, r float64, staged bool) float64 {
	l := m.link(dir)
	if n <= float64(m.CacheBytes) {
		r = m.CacheGBps
	}
	if r <= 0 || l.PeakGBps <= 0 {
		return math.Inf(1)
	}
	per, wait := 2*float64(m.DriverCopy), float64(m.Wait)
	if staged && dir == Upload && blocks >= k {
		per = float64(m.DriverCopy)
	}
	if staged && dir == Readback {
		wait = float64(m.EventLag)
	}
	fixed := float64(w-1)*float64(m.CopyJob) + float64(l.Latency) + wait + per
	copySide := n/r + float64(k)*per/float64(w)
	dmaSide := n/l.PeakGBps + float64(k-1)*float64(l.Gap)
	if blocks < 2 || k == 1 {
		return fixed + copySide + dmaSide + float64(k-1)*(float64(l.Latency)+float64(m.Wait))
	}
	// Each reuse of a block makes its next chunk wait for the DMA of the
	// chunk before it (measured: about half a chunk's DMA per reuse at
	// 16 MiB, more at small chunks).
	reuse := float64(k-blocks) * (c/l.PeakGBps/2 + float64(m.Wait))
	if dir == Upload && blocks >= k {
		// Copying that never waits for a block to come free runs beside
		// the DMAs for as long as it lasts. (Measured: with blocks reused,
		// as W2's 256 MiB in 32 chunks through 8 blocks, 8 goroutines
		// were slower than 16: 33.5-39.5 GB/s against 39.1-41.2.)
		dmaSide = m.slowedDMA(dmaSide, copySide-c/r, r-l.PeakGBps)
	}
	return fixed + reuse + max(copySide+c/l.PeakGBps, c/r+dmaSide)
}
