package transfer

import (
	"fmt"
	"math"

	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
	"github.com/vyre-go/vyrecuda/fusion"
	"github.com/vyre-go/vyrecuda/xferplan"
)

// Upload fuses copies (validated, their destination buffers bufs held in
// flight by the caller) and moves them as the planner says: Direct from
// caller-pinned memory, Staged in chunks (staged.go), Packed into one
// block with a scatter launch (packed.go, falling back to PerCopy when the
// device has no memory for the packed staging), or PerCopy: packed into
// one pinned staging block and queued as one driver copy per fused copy on
// one leased stream. Each waits on its stream once per call; Staged also
// polls an event per reused staging block. A failed drain quarantines the
// buffers with the staging (SyncOrQuarantine). No copies, or none with a
// byte, make no driver call.
func (e *Engine[E]) Upload(op string, bufs []E, copies []fusion.UploadCopy) (err error) {
	if len(copies) == 0 {
		return nil
	}
	fused, bytes, ok := copies, uint64(0), false
	if bytes, ok = fusion.DistinctUploads(copies); !ok {
		fused, bytes, err = fusion.FuseUploads(copies)
	}
	if err != nil {
		return &errs.Error{Op: op, Kind: errs.KindInvalidArgument, Detail: "fusing the uploads failed",
			Fix: "split the batch; its addresses or lengths overflow", Err: err}
	}
	if len(fused) == 0 {
		return nil
	}
	if bytes > math.MaxInt {
		return errs.New(op, errs.KindInvalidArgument, fmt.Sprintf("%d bytes do not fit one staging block", bytes),
			"split the batch into smaller ones")
	}
	Phase("fuse")
	t := e.tune
	t.stageSmall(bytes)
	req := xferplan.Request{Dir: xferplan.Upload, Copies: len(fused), Bytes: int64(bytes),
		PackedBytes: PackedBound(len(fused), bytes), Streamable: len(fused) == 1}
	var reg *hostmem.Region
	if len(fused) == 1 {
		reg = e.Pinned(fused[0].Data)
		req.Pinned = reg != nil
	}
	pl := t.Choose(req)
	Phase("plan")
	if reg != nil && pl.Kind != xferplan.Direct {
		e.pinned.Done(reg)
	}
	if e.inline != nil && pl.Kind != xferplan.Direct && len(fused) == 1 && bytes <= PageableMax {
		return e.uploadPageable(op, bufs, fused[0], len(copies))
	}
	switch pl.Kind {
	case xferplan.Direct:
		return e.uploadDirect(op, bufs, reg, fused[0].Dst, fused[0].Data, len(copies))
	case xferplan.Staged:
		return e.uploadPipelined(op, &t, &pl, bufs, fused[0].Dst, fused[0].Data, len(copies))
	case xferplan.Packed:
		err := e.uploadPacked(op, &t, &pl, bufs, fused, bytes, len(copies))
		if err != errNoPackRoom {
			return err
		}
		// No device memory for packed staging: the per-copy path needs none.
	}
	return e.uploadPerCopy(op, &t, &pl, bufs, fused, bytes, len(copies))
}

// uploadPerCopy stages every fused copy into one pinned block on
// pl.Workers goroutines and queues one driver copy per fused copy.
func (e *Engine[E]) uploadPerCopy(op string, t *Tuning, pl *xferplan.Plan, bufs []E, fused []fusion.UploadCopy, bytes uint64, requested int) error {
	st := hostmem.NewStaging(e.host)
	defer st.ReturnAll()
	stage, err := st.Slice(op, int(bytes))
	if err != nil {
		return err
	}
	Phase("staging")
	StageUploads(t, stage, fused, pl.Workers)
	Phase("copy")
	lease, err := e.launch.Lease(op, false)
	if err != nil {
		return err
	}
	Phase("lease")
	off := 0
	for _, c := range fused {
		end := off + len(c.Data)
		if err := e.drv.MemcpyHtoDAsync(c.Dst, stage[off:end:end], lease.Stream); err != nil {
			e.SyncOrQuarantine(op, InUse[E]{St: []*hostmem.Staging{&st}, Bufs: bufs}, lease)
			return errs.Driver(op, "MemcpyHtoDAsync", err)
		}
		off = end
	}
	Phase("dma")
	if err := e.drv.StreamSynchronize(lease.Stream); err != nil {
		e.SyncOrQuarantine(op, InUse[E]{St: []*hostmem.Staging{&st}, Bufs: bufs}, lease)
		return errs.Driver(op, "StreamSynchronize", err)
	}
	Phase("fence")
	e.launch.Return(lease, true)
	e.tel.SyncPoints.Add(1)
	e.tel.H2DBytes.Add(bytes)
	e.tel.UploadOps.Add(1)
	e.tel.Requested.Add(uint64(requested))
	e.tel.DeviceCopies.Add(uint64(len(fused)))
	return nil
}

// PageableMax is the largest single upload from ordinary host memory that
// the driver stages itself (driver.PageableCopier says it can) instead of
// the pinned staging: for a few KiB the driver writes the bytes into its
// command stream, which no DMA from pinned staging matches. On the
// reference H100 host cuMemcpyHtoD took 7.3 us for 4 KiB and 10.6 us for
// 16 KiB, against 10.7 and 14.1 through the staging, and 25 us for 64 KiB
// against 14.5.
const PageableMax = 32 << 10

// uploadPageable hands c's bytes, in ordinary host memory, to the driver's
// inline copy (driver.InlineCopier: it has read them when the call
// returns) on a leased stream and gives the lease back unfenced
// (streams.Pool.ReturnUnfenced): the completion event recorded after the
// copy orders every later lease of the Backend after it, so no host wait
// is needed. The driver's own synchronous pageable copy returns at the same
// point, before its DMA lands.
func (e *Engine[E]) uploadPageable(op string, bufs []E, c fusion.UploadCopy, requested int) error {
	lease, err := e.launch.Lease(op, false)
	if err != nil {
		return err
	}
	call := "MemcpyHtoDInline"
	err = e.inline.MemcpyHtoDInline(c.Dst, c.Data, lease.Stream)
	if err == nil {
		call = "EventRecord"
		err = e.drv.EventRecord(lease.Done, lease.Stream)
	}
	if err != nil {
		e.SyncOrQuarantine(op, InUse[E]{Bufs: bufs}, lease)
		return errs.Driver(op, call, err)
	}
	e.tel.DeviceCopies.Add(1)
	e.tel.H2DBytes.Add(uint64(len(c.Data)))
	e.tel.UploadOps.Add(1)
	e.tel.Requested.Add(uint64(requested))
	return e.launch.ReturnUnfenced(op, lease)
}
