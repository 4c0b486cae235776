package core

import (
	"sync/atomic"
	"time"

	"github.com/vyre-go/vyrecuda/core/internal/copyjob"
	"github.com/vyre-go/vyrecuda/fusion"
	"github.com/vyre-go/vyrecuda/internal/ntcopy"
	"github.com/vyre-go/vyrecuda/xferplan"
)

// A readback of many requests (DownloadResidentMany and the *Into calls of
// many ranges) hands gather a drain: where each request's bytes go. A
// packed readback planned in several parts (xferplan's Drainable requests)
// then brings its block over in one DMA per part, each followed by an
// event, and copies every request out of the staging as soon as the event
// after its part says the part landed, on the call's copy goroutines, while
// later parts are still on their way. On the reference H100 host, W7's
// readback (2048 buffers, 52.9 MiB) spent 1.01 ms waiting for one DMA and
// then 0.87-1.04 ms unpacking; in parts the unpacking hides behind the DMA
// but for the last part.
//
// The results stay in the drain's own slice until the call succeeds, so the
// caller's slot headers change only then. The bytes of a caller's slot that
// is reused as a request's storage, though, are written when that request
// is copied out: a device failure reported by a later part leaves such
// slots holding their buffer's whole bytes while the others keep theirs.

// drain is where a readback of many requests puts request i's bytes.
type drain struct {
	// dest returns request i's storage of exactly n bytes. It is called
	// once per request, after validation, on any of the copy goroutines.
	dest func(i, n int) []byte
	// res[i] holds request i's storage once it has been copied out.
	res [][]byte
	// fresh: every request gets new storage (dest is newSlices), so a run
	// of requests can be copied out into one allocation (drainRun).
	fresh bool
}

// newSlices is the drain dest of calls that return new slices.
func newSlices(_, n int) []byte { return make([]byte, n) }

// freshDrain returns the drain of a call that returns new slices into res.
func freshDrain(res [][]byte) *drain { return &drain{dest: newSlices, res: res, fresh: true} }

// slotDest is the drain dest of calls that reuse the storage of the caller's
// slots, append-style: request i goes into slot i's storage (any slot
// within dst's capacity) when it is large enough, else into a new slice.
func slotDest(dst [][]byte) func(i, n int) []byte {
	slots := dst[:cap(dst)]
	return func(i, n int) []byte { return reuseSlot(slots, i, n) }
}

// reuseSlot returns n bytes of slot i's storage (slots holds every slot
// within the caller's capacity) when it is large enough, else a new slice.
func reuseSlot(slots [][]byte, i, n int) []byte {
	var s []byte
	if i < len(slots) {
		s = slots[i]
	}
	if cap(s) >= n {
		return s[:n]
	}
	return make([]byte, n)
}

// slotsPool recycles the result slices of drains of the *Into calls.
var slotsPool slicePool[[]byte]

// getSlots returns a pooled slice of n nil slices.
func getSlots(n int) *[][]byte { return slotsPool.get(n) }

// putSlots clears p (it references caller memory) and gives it back.
func putSlots(p *[][]byte) { slotsPool.put(p) }

// drainOne copies request i out of the staging into its drain storage.
func (g *gathered) drainOne(i int) {
	src := g.bytes(i)
	if g.drain.fresh && len(src) > 0 {
		// One copy into memory that is not zeroed first (see drainRun).
		g.drain.res[i] = append([]byte(nil), src...)[:len(src):len(src)]
		return
	}
	out := g.drain.dest(i, len(src))
	g.copyOut(out, src)
	g.drain.res[i] = out
}

// drainAll copies every request not yet copied out (all of them unless a
// packed readback in parts did it as they landed) into the drain.
func (g *gathered) drainAll() {
	if g.drain == nil || g.drained {
		return
	}
	g.eachRun(0, len(g.drain.res), func(lo, hi int) { g.drainRun(lo, hi, nil) })
	g.drained = true
}

// freshRunMax bounds the bytes of the requests drainRun copies out into
// one shared allocation, and so what one result that outlives the others
// keeps alive.
const freshRunMax = 1 << 20

// freshRunGap is the most staging bytes between two requests that drainRun
// still copies out into one allocation (the packed layout aligns each to
// 16 bytes).
const freshRunGap = 64

// drainRun copies out the requests at positions lo..hi-1, where position p
// holds request at(p) (request p when at is nil). A fresh drain copies each
// stretch of requests that lie in order in the staging, up to freshRunMax
// bytes, into one new allocation with one copy (append, which neither
// zeroes what it copies over nor takes an allocation per request) and gives
// each request its own window of it, capacity clipped to its length. On
// the reference H100 host, W3's shape into new slices spent most of its
// time allocating and zeroing 1024 slices on 16 goroutines at once.
func (g *gathered) drainRun(lo, hi int, at func(p int) int) {
	if at == nil {
		at = func(p int) int { return p }
	}
	for p := lo; p < hi; {
		end := p + 1
		if g.drain.fresh {
			end = g.freshStretch(p, hi, at)
		}
		if end-p == 1 {
			g.drainOne(at(p))
		} else {
			g.drainShared(p, end, at)
		}
		p = end
	}
}

// freshStretch returns the end of the stretch of requests from position p
// (before hi) that drainShared may copy out together: each non-empty one
// starting at most freshRunGap bytes past the previous one's end, within
// freshRunMax bytes of the first.
func (g *gathered) freshStretch(p, hi int, at func(p int) int) int {
	first := g.bytesSpan(at(p))
	if first.n == 0 {
		return p + 1
	}
	prevEnd := first.off + first.n
	end := p + 1
	for ; end < hi; end++ {
		s := g.bytesSpan(at(end))
		if s.n == 0 || s.off < prevEnd || s.off-prevEnd > freshRunGap || s.off+s.n-first.off > freshRunMax {
			break
		}
		prevEnd = s.off + s.n
	}
	return end
}

// span is where a request's bytes lie in the staging.
type span struct{ off, n int }

// bytesSpan returns the staging span of request i (bytes(i) as offsets).
func (g *gathered) bytesSpan(i int) span {
	if g.lens[i] == 0 {
		return span{}
	}
	if g.views == nil {
		return span{g.offs[i], g.lens[i]}
	}
	v := g.views[i]
	return span{g.offs[v.Slot] + v.Offset, v.Len}
}

// drainShared copies the stretch of requests at positions lo..hi-1 (as
// freshStretch found it) out of the staging into one new allocation.
func (g *gathered) drainShared(lo, hi int, at func(p int) int) {
	base := g.bytesSpan(at(lo)).off
	last := g.bytesSpan(at(hi - 1))
	all := append([]byte(nil), g.stage[base:last.off+last.n]...)
	for p := lo; p < hi; p++ {
		i := at(p)
		s := g.bytesSpan(i)
		a := s.off - base
		g.drain.res[i] = all[a : a+s.n : a+s.n]
	}
}

// partRun is the state of a packed readback landing in parts.
type partRun struct {
	g       *gathered
	order   []int // requests by part; nil: request i is at position i
	tb      []int // task t copies out the requests at positions [tb[t], tb[t+1])
	partTB  []int // part k's tasks are [partTB[k], partTB[k+1])
	job     *copyjob.Job
	aborted atomic.Bool
	evict   bool // copy-out evicts each request's staging (no eviction after the call)
}

// at returns the request at position p.
func (r *partRun) at(p int) int {
	if r.order == nil {
		return p
	}
	return r.order[p]
}

// task copies out the requests of task t, unless the run failed.
func (r *partRun) task(t int) {
	if r.aborted.Load() {
		return
	}
	r.g.drainRun(r.tb[t], r.tb[t+1], r.at)
	for p := r.tb[t]; r.evict && p < r.tb[t+1]; p++ {
		ntcopy.Evict(r.g.bytes(r.at(p)))
	}
	ntcopy.Fence() // drainOne may have used non-temporal stores
}

// stop ends the copy job (copyjob.Job.Stop): every task has returned when it
// does, and after a failure the unclaimed ones copied nothing.
func (r *partRun) stop(shared, failed bool) { r.job.Stop(&r.aborted, shared, failed) }

// partBounds splits the copies of lay into at most parts contiguous parts,
// part k being copies [cb[k], cb[k+1]), none empty: the last about half the
// bytes of each of the others, which share the rest equally. The last
// part's copy-out is the one nothing overlaps: on the reference H100 host
// W3's copy-out after its last landing took 16.2-16.9 us against 20.6-23.1
// with equal parts (BenchmarkGPUW3Phases, four alternations), and in
// vyrecuda bench (-repeats 100, eight alternations) W7D took 1.310-1.329 ms
// against 1.335-1.365, every pair the same way, while W3 moved within the
// noise (142-194 us against 150-193).
func partBounds(lay *packLayout, n, parts int) []int {
	start := func(i int) int { return lay.offs[i] }
	cb := make([]int, 1, parts+1)
	for k := 1; k < parts; k++ {
		// Boundary k at 2k/(2*parts-1) of the bytes: parts-1 whole shares
		// and a half one.
		if hi := splitAt(start, n, cb[len(cb)-1], lay.dataEnd, 2*k, 2*parts-1); hi > cb[len(cb)-1] && hi < n {
			cb = append(cb, hi)
		}
	}
	return append(cb, n)
}

// newPartRun plans the copy-out of g's requests over the parts cb of a
// packed block: each request belongs to the part holding its fused copy,
// and each part's requests are split into tasks of about equal bytes,
// copyjob.TasksPerWorker per worker of the plan overall.
func newPartRun(g *gathered, copies []fusion.ReadbackCopy, cb []int, w int, linger time.Duration) *partRun {
	parts, n := len(cb)-1, len(g.lens)
	// The copy-out evicts each request's staging as it reads it, while
	// later parts are still landing (evictsOverlapped says when), rather
	// than after the call, where it would slow the next call's start.
	r := &partRun{g: g, evict: g.tune.evictsOverlapped(uint64(len(g.stage)))}
	// pend[p] is the first position of part p's requests.
	pend := make([]int, parts+1)
	if g.views != nil {
		partOf := make([]int32, len(copies))
		for k := range parts {
			for c := cb[k]; c < cb[k+1]; c++ {
				partOf[c] = int32(k)
			}
		}
		part := func(i int) int32 {
			if g.lens[i] == 0 {
				return 0 // an empty request reads nothing
			}
			return partOf[g.views[i].Slot]
		}
		for i := range n {
			pend[part(i)+1]++
		}
		for k := range parts {
			pend[k+1] += pend[k]
		}
		r.order = make([]int, n)
		next := append([]int(nil), pend[:parts]...)
		for i := range n {
			k := part(i)
			r.order[next[k]] = i
			next[k]++
		}
	} else {
		copy(pend, cb)
	}
	// cum[p] is the bytes of the requests before position p.
	cum := make([]int, n+1)
	for p := range n {
		cum[p+1] = cum[p] + g.lens[r.at(p)]
	}
	per := max(w*copyjob.TasksPerWorker/parts, 1)
	r.tb = make([]int, 0, parts*per+1)
	r.partTB = make([]int, parts+1)
	for k := range parts {
		r.partTB[k] = len(r.tb)
		lo, hi := pend[k], pend[k+1]
		within := func(p int) int { return cum[p] - cum[lo] }
		for t, a := 0, lo; t < per && a < hi; t++ {
			r.tb = append(r.tb, a)
			// The next task starts at the first request past this one's
			// share of the part's bytes.
			a = max(splitAt(within, hi, a, cum[hi]-cum[lo], t+1, per), a+1)
		}
	}
	r.partTB[parts] = len(r.tb)
	r.tb = append(r.tb, n)
	r.job = copyjob.NewJob(len(r.tb)-1, linger, true, r.task)
	return r
}

// partsEviction decides when the staging of r's readback (the last block
// g took) is evicted: r's copy-out evicts each request's staging as it
// reads it (r.evict, as evictsOverlapped says) unless the staging's bucket
// holds a second block, in which case the copy-out only copies and the
// eviction runs on the helpers after the call (deferred), while the next
// readback uses the other block. On the reference H100 host, 500 calls of
// W3 (1024 x 4 KiB in 5 parts) in a row took 209-235 us with the eviction
// after the call against 244-311 evicting in the copy-out (core's
// BenchmarkGPUW3Phases, variants default and inline-parts-evict, four
// alternations): the copy-out after the last part landed took 25-28 us
// instead of 53-93. In `vyrecuda bench -workloads W3 -repeats 100`, three
// alternations, W3 moved at 25.3-25.8 GB/s against 22.3-23.1.
//
// A readback that would defer but finds one block evicts in its copy-out
// and returns what it owes the pool at its end (hostPool.deferEviction):
// when the last such readback of its bucket ended within spareWindow, the
// call pins a second block for the calls after it before returning
// (hostPool.pinSpares, within the pinned cache's cap); else it notes its
// end. That costs the second readback of a run one HostAlloc of its data
// block (milliseconds at megabytes) and keeps twice that block pinned
// until Trim, while a readback now and then pins none; pinning it in the
// background instead would stall the driver calls of the readbacks running
// beside it, as it did for staged readbacks (evictLaterMaxBytes).
func (b *Backend) partsEviction(t *transferTuning, g *gathered, r *partRun) (bool, secondSet) {
	if !r.evict || !g.tune.evictReads || t.inlineParts || t.inlineEvict || len(g.st.blocks) == 0 {
		return false, secondSet{}
	}
	deferred, second := b.hostPool.deferEviction(len(g.st.blocks[len(g.st.blocks)-1].buf), 1)
	if deferred {
		r.evict = false
	}
	return deferred, second
}

// landPackedParts brings a packed readback's pieces (lay's data, already
// gathered on the device at dev by the work queued on lease's stream) into
// stage in the plan's parts, one DMA and one event each, and copies each
// request into g's drain as soon as its part has landed. Events come from
// up to maxStageEvents leases, lease's own among them, used in rotation: a
// part's DMA is queued once the part that last used its event slot has
// been seen landing. It returns the leases it took besides lease, which a
// failed caller drains with it, and the number of landings it waited for.
// Every copy-out task has returned when it does, failed or not.
func (b *Backend) landPackedParts(op string, t *transferTuning, pl *xferplan.Plan, g *gathered, lay *packLayout,
	copies []fusion.ReadbackCopy, dev uint64, stage []byte, lease *launchLease) ([]*launchLease, uint64, error) {
	cb := partBounds(lay, len(copies), max(pl.Parts, 1))
	parts := len(cb) - 1
	s := lease.Stream
	leases := []*launchLease{lease}
	queue := func(k int) error {
		lo := lay.offs[cb[k]]
		hi := lay.dataEnd
		if k+1 < parts {
			hi = lay.offs[cb[k+1]]
		}
		if err := b.drv.MemcpyDtoHAsync(stage[lo:hi:hi], dev+uint64(lo), s); err != nil {
			return driverError(op, "MemcpyDtoHAsync", err)
		}
		if err := b.drv.EventRecord(leases[k%len(leases)].Done, s); err != nil {
			return driverError(op, "EventRecord", err)
		}
		return nil
	}
	// The first part goes at once, on lease's own event; the other
	// events' leases and the copy-out's tasks are set up during its DMA.
	if err := queue(0); err != nil {
		return nil, 0, err
	}
	t.prewakeHelpers(pl.Workers)
	for len(leases) < min(parts, maxStageEvents) {
		l, err := b.lease(op, false)
		if err != nil {
			return leases[1:], 0, err
		}
		leases = append(leases, l)
	}
	events := len(leases)
	r := newPartRun(g, copies, cb, max(pl.Workers, 1), t.linger)
	deferred, second := b.partsEviction(t, g, r)
	phase("parts-setup")
	queued := 1
	for ; queued < events; queued++ {
		if err := queue(queued); err != nil {
			return leases[1:], 0, err
		}
	}
	phase("dma")
	shared := copyjob.Start(r.job, pl.Workers)
	var sp spinner
	for opened := 0; opened < parts; {
		if queued < parts && queued-opened < events {
			// The part that last used this event slot has landed.
			if err := queue(queued); err != nil {
				r.stop(shared, true)
				return leases[1:], uint64(opened), err
			}
			queued++
			continue
		}
		done, err := b.drv.EventQuery(leases[opened%events].Done)
		if err != nil {
			r.stop(shared, true)
			return leases[1:], uint64(opened), driverError(op, "EventQuery", err)
		}
		if done {
			if opened == 0 {
				phase("first-landed")
			}
			opened++
			r.job.Open(int64(r.partTB[opened]))
		} else if !r.job.Step() {
			sp.pause()
		}
	}
	phase("landed")
	r.stop(shared, false)
	g.drained, g.unpacked = true, true
	g.evictLater = deferred // else the copy-out evicted the staging, or nothing is to evict it
	second.end(b.hostPool)
	return leases[1:], uint64(parts), nil
}
