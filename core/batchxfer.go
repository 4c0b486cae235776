package core

import (
	"github.com/vyre-go/vyrecuda/core/internal/copyjob"
	"github.com/vyre-go/vyrecuda/core/internal/devmem"
	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
	"github.com/vyre-go/vyrecuda/core/internal/transfer"
	"github.com/vyre-go/vyrecuda/fusion"
	"github.com/vyre-go/vyrecuda/internal/ntcopy"
	"github.com/vyre-go/vyrecuda/xferplan"
)

// The uploads and reads of a Batch (Backend.Run, RunAsync) are planned by
// xferplan like every other transfer, and queued on the batch's one stream
// in their place (uploads after the memsets, reads after the last step):
//
//   - PerCopy: every fused upload is packed back to back into one pinned
//     block before anything is queued, with one DMA each; every fused read
//     lands in one pinned block with one DMA each.
//   - Packed: many small uploads travel as one packed block (in one or
//     more DMAs, later parts packed while earlier ones move) and a scatter
//     launch; many small reads are gathered on the device by one launch and
//     come back in one DMA. The device staging is held until the batch
//     completes.
//   - Staged: one large upload is copied into its pinned block in chunks,
//     each chunk's DMA queued as soon as its copy ends, so the copy of
//     later chunks overlaps the DMAs of earlier ones. A batch gives every
//     chunk its own part of one block: nothing waits for a block to come
//     free, so queueing never waits on the device.
//
// Direct is never chosen for a batch: RunAsync promises the caller may
// reuse its upload slices as soon as it returns, so uploads are always
// copied, and reads land in staging because their destinations are only
// known when the Pending is collected. Staged reads are ruled out for the
// same reason.
//
// A captured Graph (Backend.Capture) keeps the per-copy path: its replays
// copy the caller's current upload bytes into graph-owned staging before
// launching the graph, which cannot overlap a DMA inside the graph, and
// its staging is laid out for per-copy DMAs. A batchPlan without a
// batchXfer (x == nil) is queued that way.

// batchXfer is the transfer plans of one queued batch.
type batchXfer struct {
	t      transferTuning
	up, rd xferplan.Plan
	upLay  packLayout // Packed uploads: the block's layout
	rdLay  packLayout // Packed reads: the block's layout
	// upDev and rdDev are the packed plans' device staging; their owner
	// (the pendingWork) releases them when the batch completes.
	upDev, rdDev devmem.Block
	// scatter and gather are the packed kernels, loaded while planning so
	// nothing is taken when loading fails.
	scatter, gather Function
	dmas            uint64 // DMAs queued, for telemetry
	launches        uint64 // scatter and gather launches queued
}

// planBatchXfer chooses the plans of pl's uploads and reads and loads the
// kernels a packed plan needs.
func (b *Backend) planBatchXfer(op string, pl *batchPlan) (*batchXfer, error) {
	x := &batchXfer{t: b.tuning()}
	if pl.upBytes > 0 {
		n := len(pl.fusedUps)
		x.up = x.t.Choose(xferplan.Request{Dir: xferplan.Upload, Copies: n, Bytes: int64(pl.upBytes),
			PackedBytes: transfer.PackedBound(n, pl.upBytes), Streamable: n == 1})
	}
	if pl.nonEmptyReads > 0 {
		n := len(pl.fusedRds.Copies)
		x.rd = x.t.Choose(xferplan.Request{Dir: xferplan.Readback, Copies: n, Bytes: int64(pl.fusedRds.Bytes),
			PackedBytes: transfer.PackedBound(n, pl.fusedRds.Bytes)})
	}
	var err error
	if x.up.Kind == xferplan.Packed {
		if x.scatter, err = b.function(op, packedPrograms().scatter); err != nil {
			return nil, err
		}
	}
	if x.rd.Kind == xferplan.Packed {
		if x.gather, err = b.function(op, packedPrograms().gather); err != nil {
			return nil, err
		}
	}
	return x, nil
}

// stageBatch takes the staging of pl's transfers: pinned blocks in up (for
// the uploads) and rd (for the reads), and, for packed plans, device
// staging in x. Per-copy uploads and single-part packed uploads are packed
// into their block here; staged and multi-part packed ones are copied
// while queueing. A packed plan that finds no device memory falls back to
// per-copy. On failure the caller releases up, rd and x's device staging.
func (b *Backend) stageBatch(op string, pl *batchPlan, x *batchXfer, up *hostmem.Staging, rd *gathered) ([]byte, error) {
	var stage []byte
	var err error
	if pl.upBytes > 0 {
		if stage, err = b.stageBatchUploads(op, pl, x, up); err != nil {
			return nil, err
		}
	}
	if pl.nonEmptyReads > 0 {
		rd.st, rd.staged = hostmem.NewStaging(b.hostPool), true
		rd.plan, rd.tune = x.rd, x.t
		rd.tune.EvictReads = x.t.EvictsReadback(pl.fusedRds.Bytes)
		if x.rd.Kind == xferplan.Packed {
			copies := pl.fusedRds.Copies
			x.rdLay = transfer.NewLayout(len(copies), func(i int) int { return copies[i].Len })
			if !x.rdLay.Packable() {
				err = errNoPackRoom
			} else {
				x.rdDev, err = b.devPool.Alloc(op, x.rdLay.Total, true)
			}
			if err != nil {
				if err = noPackRoom(err); err != errNoPackRoom {
					return nil, err
				}
				x.rd.Kind = xferplan.PerCopy
				rd.plan.Kind = xferplan.PerCopy
			}
		}
		if x.rd.Kind == xferplan.Packed {
			if rd.stage, err = rd.st.Slice(op, x.rdLay.Total); err != nil {
				return nil, err
			}
			for i, c := range pl.fusedRds.Copies {
				x.rdLay.PutEntries(rd.stage, i, c.Src, c.Len)
			}
			rd.offs = x.rdLay.Offs
		} else if rd.stage, err = rd.st.Slice(op, int(pl.fusedRds.Bytes)); err != nil {
			return nil, err
		}
	}
	return stage, nil
}

// stageBatchUploads takes the upload staging of pl as x.up says (see
// stageBatch).
func (b *Backend) stageBatchUploads(op string, pl *batchPlan, x *batchXfer, up *hostmem.Staging) ([]byte, error) {
	fused := pl.fusedUps
	if x.up.Kind == xferplan.Packed {
		x.upLay = transfer.NewLayout(len(fused), func(i int) int { return len(fused[i].Data) })
		dev, err := devmem.Block{}, error(errNoPackRoom)
		if x.upLay.Packable() {
			dev, err = b.devPool.Alloc(op, x.upLay.Total, true)
		}
		if err != nil {
			if err = noPackRoom(err); err != errNoPackRoom {
				return nil, err
			}
			x.up.Kind = xferplan.PerCopy
		} else {
			x.upDev = dev
			stage, err := up.Slice(op, x.upLay.Total)
			if err != nil {
				return nil, err
			}
			// The table now; transfer.QueuePacked packs the pieces as it
			// queues their DMAs.
			for i, c := range fused {
				x.upLay.PutEntries(stage, i, c.Dst, len(c.Data))
			}
			return stage, nil
		}
	}
	stage, err := up.Slice(op, int(pl.upBytes))
	if err != nil {
		return nil, err
	}
	if x.up.Kind == xferplan.PerCopy {
		transfer.StageUploads(&x.t, stage, fused, x.up.Workers)
	}
	return stage, nil
}

// queueBatchUploads queues pl's uploads on s from stage as pl.x says (x
// nil: per-copy, stage packed by transfer.StageUploads). It returns the failed call
// and its error.
func (b *Backend) queueBatchUploads(s Stream, pl *batchPlan, stage []byte) (string, error) {
	x := pl.x
	if x == nil || x.up.Kind == xferplan.PerCopy {
		off := 0
		for _, c := range pl.fusedUps {
			stop := off + len(c.Data)
			if err := b.drv.MemcpyHtoDAsync(c.Dst, stage[off:stop:stop], s); err != nil {
				return "MemcpyHtoDAsync", err
			}
			off = stop
		}
		if x != nil {
			x.dmas += uint64(len(pl.fusedUps))
		}
		return "", nil
	}
	switch x.up.Kind {
	case xferplan.Packed:
		parts := max(min(x.up.Parts, len(pl.fusedUps)), 1)
		dmas, call, err := transfer.QueuePacked(b.drv, &x.t, &x.upLay, stage, x.upDev.Ptr(), s, pl.fusedUps, parts, x.up.Workers,
			transfer.PackFill(&x.t, &x.upLay, stage, pl.fusedUps, false))
		if err != nil {
			return call, err
		}
		x.dmas += dmas
		args := []KernelArg{{Ptr: x.upDev.Ptr(), IsPtr: true}, {Ptr: x.upDev.Ptr() + uint64(x.upLay.Table), IsPtr: true},
			{U32: uint32(x.upLay.Entries)}}
		if err := b.drv.Launch(x.scatter, x.t.PackLaunch(x.upLay.Entries), s, args); err != nil {
			return "Launch", err
		}
		x.launches++
		return "", nil
	case xferplan.Staged:
		return b.queueStagedChunks(s, x, pl.fusedUps[0], stage)
	}
	return "", nil
}

// stagedPiece is the largest unit a batch's staged upload is split into
// for its copy tasks: whole cache lines, about a quarter chunk, so parts
// split evenly (tasks copy many contiguous pieces at once).
const stagedPiece = 4 << 10

// queueStagedChunks copies c's bytes into stage in x.up.Chunks parts on
// x.up.Workers goroutines and queues each part's DMA on s as soon as its
// copy ends.
func (b *Backend) queueStagedChunks(s Stream, x *batchXfer, c fusion.UploadCopy, stage []byte) (string, error) {
	n := len(c.Data)
	piece := int(min(stagedPiece, max(64, x.up.Chunk/copyjob.TasksPerWorker&^63)))
	pieces := (n + piece - 1) / piece
	at := func(i int) int { return min(i*piece, n) }
	err := transfer.StreamParts(pieces, max(x.up.Chunks, 1), x.up.Workers, x.t.Linger, at, n,
		func(lo, hi int) { x.t.StageIn(stage[at(lo):at(hi)], c.Data[at(lo):at(hi)]); ntcopy.Fence() },
		func(_, lo, hi int) error {
			if lo == hi {
				return nil
			}
			a, z := at(lo), at(hi)
			x.dmas++
			return b.drv.MemcpyHtoDAsync(c.Dst+uint64(a), stage[a:z:z], s)
		})
	if err != nil {
		return "MemcpyHtoDAsync", err
	}
	return "", nil
}

// queueBatchReads queues pl's reads on s into pl.rd's staging as pl.x says
// (x nil: per-copy). It returns the failed call and its error.
func (b *Backend) queueBatchReads(s Stream, pl *batchPlan) (string, error) {
	x, rd := pl.x, pl.rd
	if x != nil && x.rd.Kind == xferplan.Packed {
		lay := &x.rdLay
		if err := b.drv.MemcpyHtoDAsync(x.rdDev.Ptr()+uint64(lay.Table), rd.stage[lay.Table:], s); err != nil {
			return "MemcpyHtoDAsync", err
		}
		args := []KernelArg{{Ptr: x.rdDev.Ptr(), IsPtr: true}, {Ptr: x.rdDev.Ptr() + uint64(lay.Table), IsPtr: true},
			{U32: uint32(lay.Entries)}}
		if err := b.drv.Launch(x.gather, x.t.PackLaunch(lay.Entries), s, args); err != nil {
			return "Launch", err
		}
		if err := b.drv.MemcpyDtoHAsync(rd.stage[:lay.DataEnd:lay.DataEnd], x.rdDev.Ptr(), s); err != nil {
			return "MemcpyDtoHAsync", err
		}
		x.dmas += 2
		x.launches++
		return "", nil
	}
	for i, c := range pl.fusedRds.Copies {
		stop := rd.offs[i] + c.Len
		if err := b.drv.MemcpyDtoHAsync(rd.stage[rd.offs[i]:stop:stop], c.Src, s); err != nil {
			return "MemcpyDtoHAsync", err
		}
	}
	if x != nil {
		x.dmas += uint64(len(pl.fusedRds.Copies))
	}
	return "", nil
}

// devStaging returns the device staging x holds, for a drain or a release.
func (x *batchXfer) devStaging() []*devmem.Block {
	if x == nil {
		return nil
	}
	return []*devmem.Block{&x.upDev, &x.rdDev}
}

// releaseDev gives x's device staging back (a zeroed allocation, as a
// quarantine leaves it, gives nothing back).
func (b *Backend) releaseDev(x *batchXfer) {
	if x == nil {
		return
	}
	for _, d := range x.devStaging() {
		if d.Len() > 0 {
			b.devPool.FreeOrKeep(*d)
		}
		*d = devmem.Block{}
	}
}

// copiesQueued is the DMAs and launches one run of pl queued, for the
// telemetry.
func (pl *batchPlan) copiesQueued() (dmas, launches uint64) {
	if pl.x == nil {
		return uint64(len(pl.fusedUps) + len(pl.fusedRds.Copies)), 0
	}
	return pl.x.dmas, pl.x.launches
}
