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
	// CacheBytes and CacheGBps: copies of up to CacheBytes run at least at
	// CacheGBps, the rate of one goroutine when source and destination
	// stay in the processor's caches (the source was just written, the
	// staging block was just used).
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
	// Launch is the host cost of queueing one kernel launch.
	Launch time.Duration
	// KernelGBps is the rate at which the scatter and gather kernels move
	// bytes between the packed block and the buffers on the device.
	KernelGBps float64
	// PackItem is the host cost per piece of a packed transfer beyond its
	// bytes (its table entry and its share of the split into tasks).
	PackItem time.Duration
}

// Reference is the model measured on the reference machine: an NVIDIA
// H100 80GB HBM3 on a 16-core virtual machine, CUDA 13.0, driver 580
// (core's BenchmarkGPUCostModel, 20 runs each, this library's own copy
// helpers):
//
//   - one DMA fenced alone, H2D: 12.6, 15.8, 32.4, 95, 336 and 1343 us
//     for 64 KiB, 256 KiB, 1, 4, 16 and 64 MiB, which 10 us plus 50.5
//     GB/s reproduces within 4%; D2H 10.9 to 1230 us, 10.5 us plus 55 GB/s;
//   - a copy from ordinary Go memory into pinned memory, 8 MiB: 9.0, 16.5,
//     32, 44 and 57 GB/s on 1, 2, 4, 8 and 16 goroutines; the same at 1 MiB
//     took 60, 64, 53, 44 and 53 us: starting and joining the helpers of
//     one copy job costs about 2.4 us per helper there; one goroutine
//     copied 256 KiB at 24.6 GB/s and 1 MiB at 17.5 GB/s (cache-warm);
//   - queueing one asynchronous copy 1.85 us; synchronizing an idle stream
//     2.7 us; one kernel launch 3.7 us.
//
// A later run on the same host, after a copy job's caller began polling for
// its helpers' last tasks, measured faster copies (8 MiB: 12.3, 23.6, 41.4,
// 55.4 and 71.5 GB/s on 1 to 16 goroutines; about 1.5 us per helper; one
// goroutine 28.6 GB/s at 1 MiB), DMAs of 54.7 GB/s from 64 MiB, 1.65 us per
// queued copy and 1.84 us per idle wait, and showed that DMAs queued one per
// small chunk cost about 10 us each beyond their bytes (1 MiB in 7 staged
// chunks took 115 us). The constants below are those the README's transfer
// figures were measured with; refitting them to the later run is the next
// step.
func Reference() Model {
	return Model{
		H2D: Link{Latency: 10 * time.Microsecond, PeakGBps: 50.5},
		D2H: Link{Latency: 10500 * time.Nanosecond, PeakGBps: 55},
		Copy: []CopyRate{
			{Threads: 1, GBps: 9.0}, {Threads: 2, GBps: 16.5}, {Threads: 4, GBps: 32},
			{Threads: 8, GBps: 44}, {Threads: 16, GBps: 57},
		},
		CacheBytes: 1 << 20,
		CacheGBps:  20,
		CopyJob:    2400 * time.Nanosecond,
		DriverCopy: 1850 * time.Nanosecond,
		Wait:       2700 * time.Nanosecond,
		Launch:     3700 * time.Nanosecond,
		KernelGBps: 1000,
		PackItem:   40 * time.Nanosecond,
	}
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
		r = max(r, m.CacheGBps)
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

// pipeline is the time of moving k pieces of c bytes each, copied on w
// goroutines, where the host copy of one piece overlaps the DMA of
// another: the first stage of the first piece, then the slower stage k-1
// times, then the last stage of the last piece, plus the per-piece driver
// work (a queued copy and a stream wait).
func (m *Model) pipeline(dir Direction, k int, c float64, w int) float64 {
	l := m.link(dir)
	cp, dma := m.hostCopy(c, w), l.stream(c)
	per := float64(m.DriverCopy + m.Wait)
	return cp + float64(k-1)*math.Max(cp, dma+per) + dma + float64(l.Latency) + per
}
