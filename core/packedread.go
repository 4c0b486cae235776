package core

import (
	"sync/atomic"
	"time"

	"github.com/vyre-go/vyrecuda/core/internal/copyjob"
	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
	"github.com/vyre-go/vyrecuda/core/internal/streams"
	"github.com/vyre-go/vyrecuda/core/internal/transfer"
	"github.com/vyre-go/vyrecuda/fusion"
	"github.com/vyre-go/vyrecuda/internal/ntcopy"
	"github.com/vyre-go/vyrecuda/xferplan"
)

// A readback of many requests (DownloadResidentMany and the *Into calls of
// many ranges) hands gather a drain (transfer.Drain): where each request's
// bytes go. A
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

// drainOne copies request i out of the staging into its drain storage.
func (g *gathered) drainOne(i int) {
	src := g.bytes(i)
	if g.drain.Fresh && len(src) > 0 {
		// One copy into memory that is not zeroed first (see drainRun).
		g.drain.Res[i] = append([]byte(nil), src...)[:len(src):len(src)]
		return
	}
	out := g.drain.Dest(i, len(src))
	g.copyOut(out, src)
	g.drain.Res[i] = out
}

// drainAll copies every request not yet copied out (all of them unless a
// packed readback in parts did it as they landed) into the drain.
func (g *gathered) drainAll() {
	if g.drain == nil || g.drained {
		return
	}
	g.eachRun(0, len(g.drain.Res), func(lo, hi int) { g.drainRun(lo, hi, nil) })
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
		if g.drain.Fresh {
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
		g.drain.Res[i] = all[a : a+s.n : a+s.n]
	}
}

// partRun is the state of a packed readback landing in parts: the plan
// of its copy-out (transfer.PlanParts) and the copy job that runs it.
type partRun struct {
	transfer.PartPlan
	g       *gathered
	job     *copyjob.Job
	aborted atomic.Bool
	evict   bool // copy-out evicts each request's staging (no eviction after the call)
}

// task copies out the requests of task t, unless the run failed.
func (r *partRun) task(t int) {
	if r.aborted.Load() {
		return
	}
	r.g.drainRun(r.TB[t], r.TB[t+1], r.At)
	for p := r.TB[t]; r.evict && p < r.TB[t+1]; p++ {
		ntcopy.Evict(r.g.bytes(r.At(p)))
	}
	ntcopy.Fence() // drainOne may have used non-temporal stores
}

// stop ends the copy job (copyjob.Job.Stop): every task has returned when it
// does, and after a failure the unclaimed ones copied nothing.
func (r *partRun) stop(shared, failed bool) { r.job.Stop(&r.aborted, shared, failed) }

// newPartRun plans the copy-out of g's requests over the parts cb of a
// packed block: each request belongs to the part holding its fused copy,
// and each part's requests are split into tasks of about equal bytes,
// copyjob.TasksPerWorker per worker of the plan overall.
func newPartRun(g *gathered, cb []int, w int, linger time.Duration) *partRun {
	// The copy-out evicts each request's staging as it reads it, while
	// later parts are still landing (EvictsOverlapped says when), rather
	// than after the call, where it would slow the next call's start.
	r := &partRun{g: g, evict: g.tune.EvictsOverlapped(uint64(len(g.stage)))}
	r.PartPlan = transfer.PlanParts(g.lens, g.views, cb, w)
	r.job = copyjob.NewJob(len(r.TB)-1, linger, true, r.task)
	return r
}

// partsEviction decides when the staging of r's readback (the last block
// g took) is evicted: r's copy-out evicts each request's staging as it
// reads it (r.evict, as EvictsOverlapped says) unless the staging's bucket
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
// and returns what it owes the pool at its end (hostmem.Pool.DeferEviction):
// when the last such readback of its bucket ended within the spare window,
// the call pins a second block for the calls after it before returning
// (hostmem.SecondSet.End, within the pinned cache's cap); else it notes its
// end. That costs the second readback of a run one HostAlloc of its data
// block (milliseconds at megabytes) and keeps twice that block pinned
// until Trim, while a readback now and then pins none; pinning it in the
// background instead would stall the driver calls of the readbacks running
// beside it, as it did for staged readbacks (transfer.EvictLaterMaxBytes).
func (b *Backend) partsEviction(t *transferTuning, g *gathered, r *partRun) (bool, hostmem.SecondSet) {
	if !r.evict || !g.tune.EvictReads || t.InlineParts || t.InlineEvict || g.st.Len() == 0 {
		return false, hostmem.SecondSet{}
	}
	deferred, second := b.hostPool.DeferEviction(g.st.Blocks()[g.st.Len()-1].Size(), 1)
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
	copies []fusion.ReadbackCopy, dev uint64, stage []byte, lease *streams.Lease) ([]*streams.Lease, uint64, error) {
	cb := transfer.PartBounds(lay, len(copies), max(pl.Parts, 1))
	parts := len(cb) - 1
	s := lease.Stream
	leases := []*streams.Lease{lease}
	queue := func(k int) error {
		lo := lay.Offs[cb[k]]
		hi := lay.DataEnd
		if k+1 < parts {
			hi = lay.Offs[cb[k+1]]
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
	t.PrewakeHelpers(pl.Workers)
	for len(leases) < min(parts, maxStageEvents) {
		l, err := b.launch.Lease(op, false)
		if err != nil {
			return leases[1:], 0, err
		}
		leases = append(leases, l)
	}
	events := len(leases)
	r := newPartRun(g, cb, max(pl.Workers, 1), t.Linger)
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
			r.job.Open(int64(r.PartTB[opened]))
		} else if !r.job.Step() {
			sp.pause()
		}
	}
	phase("landed")
	r.stop(shared, false)
	g.drained, g.unpacked = true, true
	g.evictLater = deferred // else the copy-out evicted the staging, or nothing is to evict it
	second.End()
	return leases[1:], uint64(parts), nil
}
