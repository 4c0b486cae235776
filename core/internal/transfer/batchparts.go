package transfer

import (
	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/streams"
	"github.com/vyre-go/vyrecuda/xferplan"
)

// A captured graph's packed reads, planned drainable in several parts
// (PlanBatch with graph set), leave their data DMA out of the graph: the
// graph uploads the table and gathers the pieces into device staging, and
// each blocking replay brings the block over after the launch, on the
// launch's stream, in the plan's parts, copying every request out into
// the caller's slots as soon as its part has landed (landPackedParts, the
// path DownloadMany takes), so only the last part's copy-out follows the
// last DMA. Nothing can run on the host between a graph's nodes, which is
// why the DMA leaves the graph. An asynchronous replay, whose reads are
// collected later, queues the whole block's DMA after the launch instead
// (QueueReadData) and unpacks at collection.
//
// Where the reads' staging is evicted from the caches (a DMA lands faster
// in evicted lines; Tuning.EvictsOverlapped), the graph holds a second
// block for the data (Read.alt) and replays land in the two blocks in
// turn: the copy-out only copies, and each block is evicted after its
// replay by the copy helpers (Read.evictAfter), while the next replay
// lands in the other one, as DownloadMany's second staging set does. Evicting in the
// copy-out kept W3G's copy-out behind the DMA (31-50 us after the last
// landing against DownloadMany's 14-17), and evicting the one block after
// the call raced the next replay's DMA into it (its landings took 98-114
// us against 60-70).

// ReadsInParts reports whether tb's packed reads land in parts after each
// launch of the graph that recorded them, outside it: planned for a graph,
// packed, in more than one part, of more than one fused copy.
func (tb *Batch) ReadsInParts() bool {
	x := tb.x
	return x != nil && x.graph && x.rd.Kind == xferplan.Packed && x.rd.Parts > 1 && len(tb.FusedRds.Copies) > 1
}

// QueueReadData queues on s, whole, the DMA of the reads a graph leaves
// out: tb's gathered packed reads, from the device staging, or its one read
// that lands after each launch (ReadLandsAfterLaunch), from its buffer;
// into tb.Rd's staging (planned and staged). It returns the failed call
// and its error.
func (e *Engine[E]) QueueReadData(s driver.Stream, tb *Batch) (string, error) {
	x, rd := tb.x, tb.Rd
	end, src := x.rdLay.DataEnd, x.rdDev.Ptr()
	if tb.ReadLandsAfterLaunch() {
		end, src = tb.FusedRds.Copies[0].Len, tb.FusedRds.Copies[0].Src
	}
	if err := e.drv.MemcpyDtoHAsync(rd.stage[:end:end], src, s); err != nil {
		return "MemcpyDtoHAsync", err
	}
	return "", nil
}

// LandReads lands tb's packed reads in parts (ReadsInParts) on lease's
// stream, where the graph that gathers them was launched, and copies each
// request into d as soon as its part has landed (landPackedParts): once
// it returns nil, everything queued on that stream has finished, and every
// request is in d.Res. It returns the leases it took besides lease (for
// their events): the caller gives them back with lease, healthy on
// success, drained on failure. Telemetry: a DMA and a sync point per part,
// on success.
func (e *Engine[E]) LandReads(op string, tb *Batch, d *Drain, lease *streams.Lease) ([]*streams.Lease, error) {
	x, rd := tb.x, tb.Rd
	rd.drain, rd.drained = d, false
	defer func() { rd.drain, rd.drained = nil, false }()
	var turn int
	if rd.alt != nil {
		// This replay lands in the block the last one did not, evicted
		// after the replay before that one.
		turn = rd.turn
		rd.evicting[turn].Wait()
		rd.stage, rd.alt = rd.alt, rd.stage
		rd.turn ^= 1
	}
	extra, parts, err := e.landPackedParts(op, &x.t, &x.rd, rd, &x.rdLay, tb.FusedRds.Copies, x.rdDev.Ptr(), rd.stage, lease)
	if err != nil {
		return extra, err
	}
	if rd.alt != nil && rd.evictLater {
		// partsEviction left the eviction to after the call (test
		// tunings that evict in the copy-out leave nothing to do here).
		rd.evictAfter(turn, rd.stage[:x.rdLay.DataEnd], rd.plan.Workers)
	}
	e.CountReadData(parts, parts)
	return extra, nil
}

// CountReadData adds the data DMAs of a graph's packed reads, queued after
// its launch, and the landings waited for (sync points) to the telemetry.
func (e *Engine[E]) CountReadData(dmas, waits uint64) {
	e.tel.DeviceCopies.Add(dmas)
	e.tel.SyncPoints.Add(waits)
}
