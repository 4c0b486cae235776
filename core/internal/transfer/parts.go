package transfer

import (
	"sync/atomic"
	"time"

	"github.com/vyre-go/vyrecuda/core/internal/copyjob"
	"github.com/vyre-go/vyrecuda/core/internal/spin"
	"github.com/vyre-go/vyrecuda/fusion"
)

// streamTaskWeight bounds the bytes of one task of a packed upload in
// parts (StreamParts): about 20 us of copying on one thread, so the
// calling goroutine, which also queues each part's DMA as soon as the
// part is packed, leaves the DMA engine idle for at most that long. With
// a task per worker's share instead (1 MiB and more for 2048 buffers of
// 16 B-256 KiB), a part's DMA waited for the caller's whole task.
const streamTaskWeight = 256 << 10

// StreamParts fills items [0, n), split into parts contiguous parts of
// about equal weight, on up to w goroutines (the caller among them) that
// share one copy job, and calls ready(k, lo, hi) on the calling goroutine
// for each part k (items [lo, hi)) in order as soon as every item of it is
// filled, while later parts are still being filled. start(i) is the
// cumulative weight before item i (non-decreasing, start(0) == 0) and total
// the weight of all items; fill(lo, hi) fills items [lo, hi). After ready
// fails the items not yet started are skipped; either way every fill has
// returned when StreamParts does. It returns ready's error.
func StreamParts(n, parts, w int, linger time.Duration, start func(i int) int, total int,
	fill func(lo, hi int), ready func(k, lo, hi int) error) error {
	if n <= 0 {
		return nil
	}
	parts = max(min(parts, n), 1)
	// Tasks per part, at most: copyjob.TasksPerWorker per worker, and small enough
	// that the caller, which queues each part's DMA, is never long inside a
	// task of its own while a part is ready.
	per := max(w*copyjob.TasksPerWorker/parts, (total/parts+streamTaskWeight-1)/streamTaskWeight, 1)
	// bounds[t] is the first item of task t; part k's tasks are
	// first[k] <= t < first[k+1].
	bounds := make([]int, 0, parts*per+1)
	first := make([]int, parts+1)
	lo := 0
	for k := range parts {
		hi := SplitAt(start, n, lo, total, k+1, parts)
		if k == parts-1 {
			hi = n
		}
		first[k] = len(bounds)
		for t, a := 0, lo; t < per && a < hi; t++ {
			bounds = append(bounds, a)
			if t == per-1 {
				a = hi
			} else {
				a = max(SplitAt(start, hi, a, total, k*per+t+1, parts*per), a+1)
			}
		}
		lo = hi
	}
	first[parts] = len(bounds)
	bounds = append(bounds, n)
	partOf := make([]int32, len(bounds)-1)
	remain := make([]atomic.Int32, parts)
	for k := range parts {
		for t := first[k]; t < first[k+1]; t++ {
			partOf[t] = int32(k)
		}
		remain[k].Store(int32(first[k+1] - first[k]))
	}
	var aborted atomic.Bool
	job := copyjob.NewJob(len(partOf), linger, false, func(t int) {
		if !aborted.Load() {
			fill(bounds[t], bounds[t+1])
		}
		remain[partOf[t]].Add(-1)
	})
	shared := copyjob.Start(job, w)
	var err error
	var sp spin.Spinner
	for q := 0; q < parts; {
		if remain[q].Load() == 0 {
			// A part with no task (empty: more parts than splits) is ready too.
			if err = ready(q, bounds[first[q]], bounds[first[q+1]]); err != nil {
				break
			}
			q++
		} else if !job.Step() {
			sp.Pause()
		}
	}
	job.Stop(&aborted, shared, err != nil)
	return err
}

// SplitAt returns the first item in [lo, hi) whose cumulative weight
// reaches the share k/of of total, or hi when none does.
func SplitAt(start func(i int) int, hi, lo, total, k, of int) int {
	goal := int(uint64(total) * uint64(k) / uint64(of))
	a, z := lo, hi
	for a < z {
		m := int(uint(a+z) >> 1)
		if start(m) < goal {
			a = m + 1
		} else {
			z = m
		}
	}
	return a
}

// PartBounds splits the copies of lay into at most parts contiguous parts,
// part k being copies [cb[k], cb[k+1]), none empty: the last about half the
// bytes of each of the others, which share the rest equally. The last
// part's copy-out is the one nothing overlaps: on the reference H100 host
// W3's copy-out after its last landing took 16.2-16.9 us against 20.6-23.1
// with equal parts (BenchmarkGPUW3Phases, four alternations), and in
// vyrecuda bench (-repeats 100, eight alternations) W7D took 1.310-1.329 ms
// against 1.335-1.365, every pair the same way, while W3 moved within the
// noise (142-194 us against 150-193).
func PartBounds(lay *Layout, n, parts int) []int {
	start := func(i int) int { return lay.Offs[i] }
	cb := make([]int, 1, parts+1)
	for k := 1; k < parts; k++ {
		// Boundary k at 2k/(2*parts-1) of the bytes: parts-1 whole shares
		// and a half one.
		if hi := SplitAt(start, n, cb[len(cb)-1], lay.DataEnd, 2*k, 2*parts-1); hi > cb[len(cb)-1] && hi < n {
			cb = append(cb, hi)
		}
	}
	return append(cb, n)
}

// PartPlan is the copy-out of a readback's requests landing in the parts
// of a packed block, as copy job tasks: task t copies out the requests at
// positions [TB[t], TB[t+1]), part k's tasks are [PartTB[k], PartTB[k+1]),
// and position p holds request At(p).
type PartPlan struct {
	Order  []int // requests by part; nil: request i is at position i
	TB     []int
	PartTB []int
}

// At returns the request at position p.
func (pp *PartPlan) At(p int) int {
	if pp.Order == nil {
		return p
	}
	return pp.Order[p]
}

// PlanParts plans the copy-out of requests (request i of lens[i] bytes, and
// views[i] of a fused copy, or copy i itself when views is nil) over the
// parts cb of a packed block (PartBounds): each request belongs to the
// part holding its fused copy (an empty one to the first), and each
// part's requests are split into tasks of about equal bytes,
// copyjob.TasksPerWorker per worker of w overall.
func PlanParts(lens []int, views []fusion.ReadbackView, cb []int, w int) PartPlan {
	parts, n := len(cb)-1, len(lens)
	var pp PartPlan
	// pend[p] is the first position of part p's requests.
	pend := make([]int, parts+1)
	if views != nil {
		pp.Order = orderByPart(lens, views, cb, pend)
	} else {
		copy(pend, cb)
	}
	// cum[p] is the bytes of the requests before position p.
	cum := make([]int, n+1)
	for p := range n {
		cum[p+1] = cum[p] + lens[pp.At(p)]
	}
	per := max(w*copyjob.TasksPerWorker/parts, 1)
	pp.TB = make([]int, 0, parts*per+1)
	pp.PartTB = make([]int, parts+1)
	for k := range parts {
		pp.PartTB[k] = len(pp.TB)
		lo, hi := pend[k], pend[k+1]
		within := func(p int) int { return cum[p] - cum[lo] }
		for t, a := 0, lo; t < per && a < hi; t++ {
			pp.TB = append(pp.TB, a)
			// The next task starts at the first request past this one's
			// share of the part's bytes.
			a = max(SplitAt(within, hi, a, cum[hi]-cum[lo], t+1, per), a+1)
		}
	}
	pp.PartTB[parts] = len(pp.TB)
	pp.TB = append(pp.TB, n)
	return pp
}

// orderByPart returns the requests (views onto the fused copies, of lens
// bytes) ordered by the part of cb holding their copy, and sets pend[k] to
// the first position of part k's requests.
func orderByPart(lens []int, views []fusion.ReadbackView, cb, pend []int) []int {
	parts, n := len(cb)-1, len(lens)
	partOf := make([]int32, cb[parts])
	for k := range parts {
		for c := cb[k]; c < cb[k+1]; c++ {
			partOf[c] = int32(k)
		}
	}
	part := func(i int) int32 {
		if lens[i] == 0 {
			return 0 // an empty request reads nothing
		}
		return partOf[views[i].Slot]
	}
	for i := range n {
		pend[part(i)+1]++
	}
	for k := range parts {
		pend[k+1] += pend[k]
	}
	order := make([]int, n)
	next := append([]int(nil), pend[:parts]...)
	for i := range n {
		k := part(i)
		order[next[k]] = i
		next[k]++
	}
	return order
}
