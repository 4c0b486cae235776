package transfer

import (
	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
	"github.com/vyre-go/vyrecuda/xferplan"
)

// A batch whose reads are collected by the call that queued it, right
// after queueing (Batch.Blocking: Run), and whose one read is a single
// copy into Go memory, plans that read as DownloadSlice plans its own:
// large enough, it is Staged. Its chunks are then left out of the queued
// batch and land after it (LandRead), on the batch's stream, through the
// staging blocks DownloadSlice uses, each chunk copied out into the
// caller's memory as soon as its event says it landed: the copy out of
// earlier chunks overlaps the DMAs of later ones, and the last chunk's
// landing replaces the batch's fence. A batch queued as one read and one
// fence copied its 2 MiB out only after the fence, which left Run at
// 1.05-1.18x the three calls it combines on an H200 (docs/perf-log-inference.md).
// The staging blocks and event leases are taken with the batch's other
// staging (StageBatch), before anything is queued.

// landing is the staging blocks and event leases of a read that lands
// after its batch (a *pipeline[E]; Batch is not generic).
type landing interface {
	staging() *hostmem.Staging
	finish(healthy bool)
}

// staging returns p's staging blocks.
func (p *pipeline[E]) staging() *hostmem.Staging { return &p.st }

// A captured graph's one read into Go memory lands the same way after
// each blocking replay (ReadLandsAfterLaunch): the graph leaves the read
// out, and Replay hands the launch's stream to LandGraphRead, which takes
// the staging blocks and event leases for that replay only. An
// asynchronous replay moves the read whole into the graph's read staging
// after its launch (QueueReadData) and copies it out at collection.

// landable reports whether tb's read may land after its work (see above):
// a blocking batch or a graph's, with non-atomic reads, whose one read
// request is its one fused copy (the whole of it) and who has no direct
// read.
func (tb *Batch) landable(t *Tuning, graph bool) bool {
	return (tb.Blocking || graph) && !t.AtomicReads && tb.Rd != nil && len(tb.Rd.lens) == 1 &&
		tb.NonEmptyReads == 1 && len(tb.FusedRds.Copies) == 1 && len(tb.DirectRds) == 0
}

// ReadLandsAfterLaunch reports whether tb, planned for a graph, leaves its
// one read out of the graph to land after each launch (see above).
func (tb *Batch) ReadLandsAfterLaunch() bool {
	return tb != nil && tb.x != nil && tb.x.graph && tb.x.rd.Kind == xferplan.Staged
}

// LandGraphRead lands the read of tb (ReadLandsAfterLaunch) in chunks on
// s, the stream a replay launched the graph on, into out (the read's
// length), as LandRead does, with staging blocks and event leases taken
// for this landing. On failure the caller drains s (with LandingStaging
// in the drain's quarantine), then calls DropLanding.
func (e *Engine[E]) LandGraphRead(op string, tb *Batch, s driver.Stream, out []byte) error {
	p, err := e.stagedPipeline(op, &tb.x.rd)
	if err != nil {
		return err
	}
	tb.x.landing = p
	return e.LandRead(tb, s, out)
}

// DropLanding gives back the staging blocks and leases of a read that is
// still to land (a graph read whose landing failed, or a batch released
// without landing it), once its stream was drained (or quarantined, which
// took the blocks); it does nothing when no landing is held.
func (tb *Batch) DropLanding() {
	if tb.LandsRead() {
		tb.x.landing.finish(true)
		tb.x.landing = nil
	}
}

// LandsRead reports whether tb's read is still to land after its queued
// work (LandRead); tb may be nil.
func (tb *Batch) LandsRead() bool { return tb != nil && tb.x != nil && tb.x.landing != nil }

// LandingStaging returns the staging of tb's read still to land, for a
// quarantine; nil when there is none.
func (tb *Batch) LandingStaging() *hostmem.Staging {
	if !tb.LandsRead() {
		return nil
	}
	return tb.x.landing.staging()
}

// LandRead lands tb's read (LandsRead) in chunks on s, the stream its
// work was queued on, into out (the read's length), copying each chunk
// out as soon as it has landed. Once it returns nil everything queued on
// s has finished, and the staging is given back. On failure out may hold
// part of the read; the caller drains s, then releases tb (ReleaseBatch),
// with LandingStaging in the drain's quarantine. Telemetry: a device copy
// per chunk and a sync point per landing waited for, on success.
func (e *Engine[E]) LandRead(tb *Batch, s driver.Stream, out []byte) error {
	x := tb.x
	t := x.t
	t.EvictReads = t.EvictsReadback(tb.FusedRds.Bytes) // as DownloadSlice's staged readback does
	r := e.stagedRunOn(x.landing.(*pipeline[E]), &t, &x.rd, out, tb.FusedRds.Copies[0].Src, false)
	r.on = s
	if err := r.land(); err != nil {
		return err
	}
	x.landing = nil
	r.finishRead()
	e.tel.SyncPoints.Add(r.waits)
	e.tel.DeviceCopies.Add(uint64(len(r.remain)))
	return nil
}
