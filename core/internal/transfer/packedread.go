package transfer

import (
	"sync/atomic"
	"time"

	"github.com/vyre-go/vyrecuda/core/internal/copyjob"
	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
	"github.com/vyre-go/vyrecuda/core/internal/spin"
	"github.com/vyre-go/vyrecuda/core/internal/streams"
	"github.com/vyre-go/vyrecuda/fusion"
	"github.com/vyre-go/vyrecuda/internal/ntcopy"
	"github.com/vyre-go/vyrecuda/xferplan"
)

// A readback of many requests (core's DownloadMany and the deprecated calls
// built on it; a graph replay's packed reads in parts, batchparts.go, take
// the same landing) hands Gather a Drain: where each request's bytes go. A packed
// readback planned in several parts (xferplan's Drainable requests) then
// brings its block over in one DMA per part, each followed by an event, and
// copies every request out of the staging as soon as the event after its
// part says the part landed, on the call's copy goroutines, while later
// parts are still on their way. On the reference H100 host, W7's readback
// (2048 buffers, 52.9 MiB) spent 1.01 ms waiting for one DMA and then
// 0.87-1.04 ms unpacking; in parts the unpacking hides behind the DMA but
// for the last part.
//
// The results stay in the drain's own slice until the call succeeds, so the
// caller's slot headers change only then. The bytes of a caller's slot that
// is reused as a request's storage, though, are written when that request
// is copied out: a device failure reported by a later part leaves such
// slots holding their buffer's whole bytes while the others keep theirs.

// partRun is the state of a packed readback landing in parts: the plan
// of its copy-out (PlanParts) and the copy job that runs it.
type partRun struct {
	PartPlan
	g       *Read
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
func newPartRun(g *Read, cb []int, w int, linger time.Duration) *partRun {
	// The copy-out evicts each request's staging as it reads it, while
	// later parts are still landing (EvictsOverlapped says when), rather
	// than after the call, where it would slow the next call's start.
	r := &partRun{g: g, evict: g.tune.EvictsOverlapped(uint64(len(g.stage)))}
	r.PartPlan = PlanParts(g.lens, g.views, cb, w)
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
// A graph's reads (kept staging, reused by every replay and never
// released) that evict have a second block and are evicted after the
// replay (LandReads); the others do not evict.
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
// beside it, as it did for staged readbacks (EvictLaterMaxBytes).
func (e *Engine[E]) partsEviction(t *Tuning, g *Read, r *partRun) (bool, hostmem.SecondSet) {
	if g.alt != nil && r.evict && !t.InlineParts && !t.InlineEvict {
		r.evict = false // a graph's block is evicted after its replay (LandReads)
		return true, hostmem.SecondSet{}
	}
	if !r.evict || !g.tune.EvictReads || t.InlineParts || t.InlineEvict || g.kept || g.st.Len() == 0 {
		return false, hostmem.SecondSet{}
	}
	deferred, second := e.host.DeferEviction(g.st.Blocks()[g.st.Len()-1].Size(), 1)
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
func (e *Engine[E]) landPackedParts(op string, t *Tuning, pl *xferplan.Plan, g *Read, lay *Layout,
	copies []fusion.ReadbackCopy, dev uint64, stage []byte, lease *streams.Lease) ([]*streams.Lease, uint64, error) {
	cb := PartBounds(lay, len(copies), max(pl.Parts, 1))
	parts := len(cb) - 1
	s := lease.Stream
	leases := []*streams.Lease{lease}
	queue := func(k int) error {
		lo := lay.Offs[cb[k]]
		hi := lay.DataEnd
		if k+1 < parts {
			hi = lay.Offs[cb[k+1]]
		}
		if err := e.drv.MemcpyDtoHAsync(stage[lo:hi:hi], dev+uint64(lo), s); err != nil {
			return errs.Driver(op, "MemcpyDtoHAsync", err)
		}
		if err := e.drv.EventRecord(leases[k%len(leases)].Done, s); err != nil {
			return errs.Driver(op, "EventRecord", err)
		}
		return nil
	}
	// The first part goes at once, on lease's own event; the other
	// events' leases are taken and their parts queued during its DMA, and
	// only then is the copy-out planned: planning W3's 1024 requests took
	// 11-23 us on an H200, longer than the first part's DMA, which left the
	// DMA engine idle until the second part was queued.
	if err := queue(0); err != nil {
		return nil, 0, err
	}
	t.PrewakeHelpers(pl.Workers)
	for len(leases) < min(parts, maxStageEvents) {
		l, err := e.launch.Lease(op, false)
		if err != nil {
			return leases[1:], 0, err
		}
		leases = append(leases, l)
	}
	events := len(leases)
	queued := 1
	for ; queued < events; queued++ {
		if err := queue(queued); err != nil {
			return leases[1:], 0, err
		}
	}
	Phase("dma")
	r := newPartRun(g, cb, max(pl.Workers, 1), t.Linger)
	deferred, second := e.partsEviction(t, g, r)
	Phase("parts-setup")
	shared := copyjob.Start(r.job, pl.Workers)
	var sp spin.Spinner
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
		done, err := e.drv.EventQuery(leases[opened%events].Done)
		if err != nil {
			r.stop(shared, true)
			return leases[1:], uint64(opened), errs.Driver(op, "EventQuery", err)
		}
		if done {
			if opened == 0 {
				Phase("first-landed")
			}
			opened++
			r.job.Open(int64(r.PartTB[opened]))
		} else if !r.job.Step() {
			sp.Pause()
		}
	}
	Phase("landed")
	r.stop(shared, false)
	g.drained, g.unpacked = true, true
	g.evictLater = deferred // else the copy-out evicted the staging, or nothing is to evict it
	second.End()
	return leases[1:], uint64(parts), nil
}
