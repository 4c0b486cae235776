package transfer

import (
	"fmt"
	"math"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/copyjob"
	"github.com/vyre-go/vyrecuda/core/internal/devmem"
	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
	"github.com/vyre-go/vyrecuda/fusion"
	"github.com/vyre-go/vyrecuda/internal/ntcopy"
	"github.com/vyre-go/vyrecuda/xferplan"
)

// The uploads and reads of a core Batch (Backend.Run, RunAsync) are planned by
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
// Direct is never chosen by the planner for a batch: RunAsync promises the
// caller may reuse its upload slices from Go memory as soon as it returns,
// so those are always copied, and reads land in staging unless their
// destinations are known at submission. Copies whose host side lies in
// memory pinned through the Backend are taken out before planning and
// moved by DMA directly (batchdirect.go). Staged reads are ruled out: the
// batch's one fence comes after its last read.
//
// A captured Graph (Backend.Capture) records the plan Run would choose,
// in one part (PlanBatch with graph set): its replays copy the caller's
// current upload bytes into the graph's staging before launching the
// graph, which cannot overlap a DMA inside the graph. Its packed reads
// in parts are the exception (batchparts.go). A Batch never planned
// (PlanBatch) is queued per copy.

// Batch is the transfers of one batch: its uploads and reads, validated
// by the caller, fused (Fuse), and, once planned (PlanBatch), their plans
// and the device staging of packed plans. A Batch that was never planned
// (x == nil) is queued per copy.
type Batch struct {
	Ups           []fusion.UploadCopy // the non-empty uploads, in batch order
	FusedUps      []fusion.UploadCopy
	UpBytes       uint64
	FusedRds      fusion.FusedReadbacks
	Rd            *Read // read lengths and views; nil without reads
	NonEmptyReads int
	// DirectUps and DirectRds are the uploads from and reads into
	// caller-pinned memory (batchdirect.go), moved without staging;
	// Regions holds one pending use of each region they touch, dropped by
	// ReleaseBatch (or taken over by a quarantine, InUse.Regions).
	DirectUps []DirectUp
	DirectRds []DirectRead
	Regions   []*hostmem.Region
	// AfterSteps: the reads are queued behind kernels of the batch (a
	// direct read may then be written by the copy kernel, kernelread.go).
	AfterSteps bool
	// Blocking: the reads are collected right after queueing by the call
	// that queued the batch (Run), so a single large read may land in
	// chunks after the batch's work (batchland.go).
	Blocking bool
	x        *batchXfer
}

// Reads reports whether tb reads anything back (staged or direct).
func (tb *Batch) Reads() bool { return tb.NonEmptyReads > 0 || len(tb.DirectRds) > 0 }

// Fuse fuses the batch's uploads (Ups) and its read requests reqs (request
// i reads reqs[i], none of them empty but NonEmptyReads), and lays the
// fused reads out back to back in one staging block (Rd).
func (tb *Batch) Fuse(op string, reqs []fusion.ReadbackCopy) error {
	if len(reqs) > 0 {
		tb.Rd = &Read{lens: make([]int, len(reqs))}
		for i, r := range reqs {
			tb.Rd.lens[i] = r.Len
		}
	}
	var err error
	tb.FusedUps, tb.UpBytes, err = fusion.FuseUploads(tb.Ups)
	if err != nil {
		return &errs.Error{Op: op, Kind: errs.KindInvalidArgument, Detail: "fusing the uploads failed",
			Fix: "split the batch; its addresses or lengths overflow", Err: err}
	}
	if tb.NonEmptyReads > 0 {
		if tb.FusedRds, err = fusion.FuseReadbacks(reqs); err != nil {
			return &errs.Error{Op: op, Kind: errs.KindInvalidArgument, Detail: "fusing the reads failed",
				Fix: "split the batch; its addresses or lengths overflow", Err: err}
		}
	}
	if tb.UpBytes > math.MaxInt || tb.FusedRds.Bytes > math.MaxInt {
		return errs.New(op, errs.KindInvalidArgument,
			fmt.Sprintf("%d upload bytes and %d read bytes; each must fit one staging block", tb.UpBytes, tb.FusedRds.Bytes),
			"split the batch into smaller ones")
	}
	if tb.NonEmptyReads > 0 {
		tb.Rd.views = tb.FusedRds.Views
		tb.Rd.offs = make([]int, len(tb.FusedRds.Copies))
		off := 0
		for i, c := range tb.FusedRds.Copies {
			// Each read starts on a whole word of the staging, so a
			// copy kernel can write it (kernelread.go).
			off = (off + 3) &^ 3
			tb.Rd.offs[i] = off
			off += c.Len
		}
		tb.Rd.size = off
	}
	return nil
}

// batchXfer is the transfer plans of one queued batch.
type batchXfer struct {
	t      Tuning
	up, rd xferplan.Plan
	upLay  Layout // Packed uploads: the block's layout
	rdLay  Layout // Packed reads: the block's layout
	// upDev and rdDev are the packed plans' device staging; their owner
	// (core's pending work) gives them back when the batch completes
	// (ReleaseBatch).
	upDev, rdDev devmem.Block
	// scatter and gather are the packed kernels, loaded while planning so
	// nothing is taken when loading fails.
	scatter, gather driver.Function
	copyOut         driver.Function // the copy kernel of direct reads (kernelread.go); 0: none
	landing         landing         // the staging of a read landing after the batch (batchland.go); nil: none
	dmas            uint64          // DMAs queued, for telemetry
	launches        uint64          // scatter and gather launches queued
	kernelReads     uint64          // direct reads queued as copy kernels
	// graph: planned for a captured graph (PlanBatch); its packed reads
	// may be drainable, landing in parts after each launch (batchparts.go).
	graph bool
}

// PlanBatch chooses the plans of tb's uploads and reads and loads the
// kernels a packed plan needs. For a graph (captured, then replayed with
// its host copies made before each launch) a staged upload is moved in one
// copy and a packed one in one part: nothing on the host can run between
// a graph's nodes. A graph's reads are planned drainable (unless reads
// are atomic): a packed plan in several parts leaves its data DMA out of
// the graph, and each replay lands it in parts after the launch
// (batchparts.go). On failure tb stays unplanned.
func (e *Engine[E]) PlanBatch(op string, tb *Batch, graph bool) error {
	x := &batchXfer{t: e.tune, graph: graph}
	x.t.stageSmall(tb.UpBytes)
	if tb.UpBytes > 0 {
		n := len(tb.FusedUps)
		t := x.t
		if graph {
			t.Plan.PackParts, t.Plan.StageMin = 1, -1
		}
		x.up = t.Choose(xferplan.Request{Dir: xferplan.Upload, Copies: n, Bytes: int64(tb.UpBytes),
			PackedBytes: PackedBound(n, tb.UpBytes), Streamable: n == 1})
	}
	if tb.NonEmptyReads > 0 {
		n := len(tb.FusedRds.Copies)
		x.rd = x.t.Choose(xferplan.Request{Dir: xferplan.Readback, Copies: n, Bytes: int64(tb.FusedRds.Bytes),
			PackedBytes: PackedBound(n, tb.FusedRds.Bytes), Drainable: graph && !x.t.AtomicReads,
			Streamable: tb.landable(&x.t, graph)})
	}
	var err error
	if x.up.Kind == xferplan.Packed {
		if x.scatter, err = e.kernel(op, Scatter); err != nil {
			return err
		}
	}
	if x.rd.Kind == xferplan.Packed {
		if x.gather, err = e.kernel(op, Gather); err != nil {
			return err
		}
	}
	if e.anyKernelRead(x, tb) {
		if x.copyOut, err = e.kernel(op, CopyOut); err != nil {
			return err
		}
	}
	tb.x = x
	return nil
}

// StageBatch takes the staging of tb's transfers (planned): pinned blocks
// in up (for the uploads) and in tb.Rd (for the reads), and, for packed
// plans, device staging. Per-copy uploads and single-part packed uploads
// are packed into their block here; staged and multi-part packed ones are
// copied while queueing. A packed plan that finds no device memory falls
// back to per-copy. It returns the upload staging; on failure the caller
// releases up, tb.Rd and tb's device staging (ReleaseBatch).
func (e *Engine[E]) StageBatch(op string, tb *Batch, up *hostmem.Staging) ([]byte, error) {
	x, rd := tb.x, tb.Rd
	var stage []byte
	var err error
	if tb.UpBytes > 0 {
		if stage, err = e.stageBatchUploads(op, tb, x, up); err != nil {
			return nil, err
		}
	}
	if x.rd.Kind == xferplan.Staged && !x.graph {
		// The read lands after the batch (batchland.go); a graph's
		// replays take their landing's staging each, and keep the
		// whole read's below for asynchronous ones.
		p, err := e.stagedPipeline(op, &x.rd)
		if err != nil {
			return nil, err
		}
		x.landing = p
		return stage, nil
	}
	if tb.NonEmptyReads > 0 {
		rd.st, rd.staged = hostmem.NewStaging(e.host), true
		rd.plan, rd.tune = x.rd, x.t
		rd.tune.EvictReads = x.t.EvictsReadback(tb.FusedRds.Bytes)
		// Unpack on as many goroutines as copying the bytes out wants (a
		// readback that lands whole is planned for its DMA alone: one
		// thread took 150 us to unpack 1024 x 4 KiB out of a graph's
		// staging on the H100 host).
		rd.plan.Workers = max(rd.plan.Workers, x.t.CopyWorkers(tb.FusedRds.Bytes))
		if x.rd.Kind == xferplan.Packed {
			copies := tb.FusedRds.Copies
			x.rdLay = NewLayout(len(copies), func(i int) int { return copies[i].Len })
			if !x.rdLay.Packable() {
				err = errNoPackRoom
			} else {
				x.rdDev, err = e.dev.Alloc(op, x.rdLay.Total, true)
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
			for i, c := range tb.FusedRds.Copies {
				x.rdLay.PutEntries(rd.stage, i, c.Src, c.Len)
			}
			rd.offs = x.rdLay.Offs
			if tb.ReadsInParts() && rd.tune.EvictsOverlapped(uint64(x.rdLay.DataEnd)) {
				// A second block for the data (batchparts.go).
				if rd.alt, err = rd.st.Slice(op, x.rdLay.DataEnd); err != nil {
					return nil, err
				}
			}
		} else if rd.stage, err = rd.st.Slice(op, rd.size); err != nil {
			return nil, err
		}
	}
	return stage, nil
}

// stageBatchUploads takes the upload staging of tb as x.up says (see
// StageBatch).
func (e *Engine[E]) stageBatchUploads(op string, tb *Batch, x *batchXfer, up *hostmem.Staging) ([]byte, error) {
	fused := tb.FusedUps
	if x.up.Kind == xferplan.Packed {
		x.upLay = NewLayout(len(fused), func(i int) int { return len(fused[i].Data) })
		dev, err := devmem.Block{}, error(errNoPackRoom)
		if x.upLay.Packable() {
			dev, err = e.dev.Alloc(op, x.upLay.Total, true)
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
			// The table now; QueuePacked packs the pieces as it
			// queues their DMAs.
			for i, c := range fused {
				x.upLay.PutEntries(stage, i, c.Dst, len(c.Data))
			}
			return stage, nil
		}
	}
	stage, err := up.Slice(op, int(tb.UpBytes))
	if err != nil {
		return nil, err
	}
	if x.up.Kind == xferplan.PerCopy {
		StageUploads(&x.t, stage, fused, x.up.Workers)
	}
	return stage, nil
}

// QueueBatchUploads queues tb's uploads on s from stage as tb's plans say
// (unplanned: per-copy, stage packed by StageUploads), then its direct
// uploads. It returns the failed call and its error.
func (e *Engine[E]) QueueBatchUploads(s driver.Stream, tb *Batch, stage []byte) (string, error) {
	if tb.UpBytes > 0 {
		if call, err := e.queueFusedUploads(s, tb, stage); err != nil {
			return call, err
		}
	}
	return e.queueDirectUps(s, tb)
}

// queueFusedUploads queues tb's fused uploads (QueueBatchUploads).
func (e *Engine[E]) queueFusedUploads(s driver.Stream, tb *Batch, stage []byte) (string, error) {
	x := tb.x
	if x == nil || x.up.Kind == xferplan.PerCopy {
		off := 0
		for _, c := range tb.FusedUps {
			stop := off + len(c.Data)
			if err := e.drv.MemcpyHtoDAsync(c.Dst, stage[off:stop:stop], s); err != nil {
				return "MemcpyHtoDAsync", err
			}
			off = stop
		}
		if x != nil {
			x.dmas += uint64(len(tb.FusedUps))
		}
		return "", nil
	}
	switch x.up.Kind {
	case xferplan.Packed:
		parts := max(min(x.up.Parts, len(tb.FusedUps)), 1)
		dmas, call, err := QueuePacked(e.drv, &x.t, &x.upLay, stage, x.upDev.Ptr(), s, tb.FusedUps, parts, x.up.Workers,
			PackFill(&x.t, &x.upLay, stage, tb.FusedUps, false))
		if err != nil {
			return call, err
		}
		x.dmas += dmas
		args := []driver.KernelArg{{Ptr: x.upDev.Ptr(), IsPtr: true}, {Ptr: x.upDev.Ptr() + uint64(x.upLay.Table), IsPtr: true},
			{U32: uint32(x.upLay.Entries)}}
		if err := e.drv.Launch(x.scatter, x.t.PackLaunch(x.upLay.Entries), s, args); err != nil {
			return "Launch", err
		}
		x.launches++
		return "", nil
	case xferplan.Staged:
		return e.queueStagedChunks(s, x, tb.FusedUps[0], stage)
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
func (e *Engine[E]) queueStagedChunks(s driver.Stream, x *batchXfer, c fusion.UploadCopy, stage []byte) (string, error) {
	n := len(c.Data)
	piece := int(min(stagedPiece, max(64, x.up.Chunk/copyjob.TasksPerWorker&^63)))
	pieces := (n + piece - 1) / piece
	at := func(i int) int { return min(i*piece, n) }
	err := StreamParts(pieces, max(x.up.Chunks, 1), x.up.Workers, x.t.Linger, at, n,
		func(lo, hi int) { x.t.StageIn(stage[at(lo):at(hi)], c.Data[at(lo):at(hi)]); ntcopy.Fence() },
		func(_, lo, hi int) error {
			if lo == hi {
				return nil
			}
			a, z := at(lo), at(hi)
			x.dmas++
			return e.drv.MemcpyHtoDAsync(c.Dst+uint64(a), stage[a:z:z], s)
		})
	if err != nil {
		return "MemcpyHtoDAsync", err
	}
	return "", nil
}

// QueueBatchReads queues tb's reads on s into tb.Rd's staging as tb's
// plans say (unplanned: per-copy), then its direct reads. It returns the
// failed call and its error.
func (e *Engine[E]) QueueBatchReads(s driver.Stream, tb *Batch) (string, error) {
	if tb.NonEmptyReads > 0 && !tb.LandsRead() && !tb.ReadLandsAfterLaunch() {
		if call, err := e.queueFusedReads(s, tb); err != nil {
			return call, err
		}
	}
	return e.queueDirectReads(s, tb)
}

// queueFusedReads queues tb's staged reads (QueueBatchReads).
func (e *Engine[E]) queueFusedReads(s driver.Stream, tb *Batch) (string, error) {
	x, rd := tb.x, tb.Rd
	if x != nil && x.rd.Kind == xferplan.Packed {
		lay := &x.rdLay
		if err := e.drv.MemcpyHtoDAsync(x.rdDev.Ptr()+uint64(lay.Table), rd.stage[lay.Table:], s); err != nil {
			return "MemcpyHtoDAsync", err
		}
		args := []driver.KernelArg{{Ptr: x.rdDev.Ptr(), IsPtr: true}, {Ptr: x.rdDev.Ptr() + uint64(lay.Table), IsPtr: true},
			{U32: uint32(lay.Entries)}}
		if err := e.drv.Launch(x.gather, x.t.PackLaunch(lay.Entries), s, args); err != nil {
			return "Launch", err
		}
		x.dmas++
		x.launches++
		if tb.ReadsInParts() {
			return "", nil // each replay lands the data after the launch
		}
		x.dmas++
		return e.QueueReadData(s, tb)
	}
	for i, c := range tb.FusedRds.Copies {
		stop := rd.offs[i] + c.Len
		out := rd.stage[rd.offs[i]:stop:stop]
		if x != nil && x.copyOut != 0 && e.kernelRead(&x.t, tb, c.Src, hostAddr(out), c.Len) {
			if err := e.queueKernelRead(x.copyOut, s, c.Src, out); err != nil {
				return "Launch", err
			}
			x.launches++
			continue
		}
		if err := e.drv.MemcpyDtoHAsync(out, c.Src, s); err != nil {
			return "MemcpyDtoHAsync", err
		}
		if x != nil {
			x.dmas++
		}
	}
	return "", nil
}

// UploadStaging returns where each fused upload's bytes start in the
// upload staging of a planned and staged tb (the packed block's offsets,
// or nil when they lie back to back), and the goroutines a graph's replay
// copies them with: its plan's, or as many as copying the bytes wants (a
// graph's plan is for its DMAs alone; one large upload is planned per
// copy there, on one goroutine).
func (tb *Batch) UploadStaging() (starts []int, workers int) {
	if tb.x == nil {
		return nil, 1
	}
	if tb.x.up.Kind == xferplan.Packed {
		starts = tb.x.upLay.Offs
	}
	return starts, max(tb.x.up.Workers, tb.x.t.CopyWorkers(tb.UpBytes))
}

// PackCopy returns how a graph's replays copy upload bytes into its
// staging, as packed uploads do (non-temporal stores unless t.PlainPack),
// and the fence that must follow each goroutine's copies.
func (t *Tuning) PackCopy() (cp func(dst, src []byte), fence func()) {
	if t.PlainPack {
		return func(dst, src []byte) { copy(dst, src) }, func() {}
	}
	return func(dst, src []byte) { ntcopy.Copy(dst, src) }, ntcopy.Fence
}

// DevStaging returns the device staging tb holds, for a quarantine (nil
// when tb is nil or unplanned).
func (tb *Batch) DevStaging() []*devmem.Block {
	if tb == nil || tb.x == nil {
		return nil
	}
	return []*devmem.Block{&tb.x.upDev, &tb.x.rdDev}
}

// ReleaseBatch gives tb's device staging back (a zeroed allocation, as a
// quarantine leaves it, gives nothing back) and drops its pinned regions'
// pending uses; tb may be nil.
func (e *Engine[E]) ReleaseBatch(tb *Batch) {
	if tb == nil {
		return
	}
	e.Unpin(tb.Regions...)
	tb.Regions = nil
	tb.DropLanding()
	for _, d := range tb.DevStaging() {
		if d.Len() > 0 {
			e.dev.FreeOrKeep(*d)
		}
		*d = devmem.Block{}
	}
}

// CountBatch adds what one run of tb moves to the telemetry: its bytes,
// its calls that moved any, the copies requested, and the DMAs and packed
// launches queued.
func (e *Engine[E]) CountBatch(tb *Batch) {
	dup, drd := tb.directBytes()
	if up := tb.UpBytes + dup; up > 0 {
		e.tel.H2DBytes.Add(up)
		e.tel.UploadOps.Add(1)
	}
	if rd := tb.FusedRds.Bytes + drd; rd > 0 {
		e.tel.D2HBytes.Add(rd)
		e.tel.ReadbackOps.Add(1)
	}
	direct := uint64(len(tb.DirectUps) + len(tb.DirectRds))
	e.tel.Requested.Add(uint64(len(tb.Ups)+tb.NonEmptyReads) + direct)
	dmas, launches := uint64(len(tb.FusedUps)+len(tb.FusedRds.Copies)), uint64(0)
	if tb.x != nil {
		dmas, launches = tb.x.dmas, tb.x.launches+tb.x.kernelReads
		direct -= tb.x.kernelReads
	}
	e.tel.DeviceCopies.Add(dmas + direct)
	e.tel.PackedLaunches.Add(launches)
}
