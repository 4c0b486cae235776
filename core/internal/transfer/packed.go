package transfer

import (
	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/devmem"
	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
	"github.com/vyre-go/vyrecuda/fusion"
	"github.com/vyre-go/vyrecuda/xferplan"
)

// A packed transfer moves many small copies as one block (layout.go): one
// DMA (or one per part) and one scatter launch for uploads, one gather
// launch and one DMA (or one per part, packedread.go) for readbacks. This
// file takes the staging, device memory and stream they work on, and
// accounts for the calls.

// uploadPacked moves fused copies (bytes in all, requested copies before
// fusion) as one packed block: one DMA (or, when the plan has several parts,
// one DMA per part, each queued as soon as its part is packed so packing
// overlaps the DMAs, the table going with the last), one scatter launch,
// one fence. The module is loaded before anything is taken, so a load
// failure holds nothing; when the device staging allocation runs out of
// memory it returns errNoPackRoom with nothing queued; every later failure
// drains the stream and gives back both staging allocations.
//
// Telemetry: HostToDeviceBytes counts the payload (not the table and
// padding), DeviceCopies the DMAs, PackedLaunches the scatter.
func (e *Engine[E]) uploadPacked(op string, t *Tuning, pl *xferplan.Plan, bufs []E, fused []fusion.UploadCopy, bytes uint64, requested int) error {
	f, err := e.kernel(op, Scatter)
	if err != nil {
		return err
	}
	offs, first := GetInts(len(fused)), GetInts(len(fused))
	defer PutInts(offs)
	defer PutInts(first)
	lay := NewLayoutIn(*offs, *first, func(i int) int { return len(fused[i].Data) })
	if !lay.Packable() {
		return errNoPackRoom
	}
	st := hostmem.NewStaging(e.host)
	defer st.ReturnAll()
	stage, err := st.Slice(op, lay.Total)
	if err != nil {
		return err
	}
	dev, err := e.dev.Alloc(op, lay.Total, true)
	if err != nil {
		return noPackRoom(err)
	}
	defer func() { e.dev.FreeOrKeep(dev) }() // zero once quarantined
	lease, err := e.launch.Lease(op, false)
	if err != nil {
		return err
	}
	s := lease.Stream
	Phase("staging")
	fail := func(call string, err error) error {
		e.SyncOrQuarantine(op, InUse[E]{St: []*hostmem.Staging{&st}, Dev: []*devmem.Block{&dev}, Bufs: bufs}, lease)
		return errs.Driver(op, call, err)
	}
	// Each piece's table entry is written by whoever packs the piece, so
	// the table costs the caller no pass of its own.
	fill := PackFill(t, &lay, stage, fused, true)
	dmas, call, err := QueuePacked(e.drv, t, &lay, stage, dev.Ptr(), s, fused, max(min(pl.Parts, len(fused)), 1), pl.Workers, fill)
	if err != nil {
		return fail(call, err)
	}
	args := []driver.KernelArg{{Ptr: dev.Ptr(), IsPtr: true}, {Ptr: dev.Ptr() + uint64(lay.Table), IsPtr: true}, {U32: uint32(lay.Entries)}}
	if err := e.drv.Launch(f, t.PackLaunch(lay.Entries), s, args); err != nil {
		return fail("Launch", err)
	}
	if err := t.Step(e.drv, s, "launch"); err != nil {
		return fail("StreamSynchronize", err)
	}
	if call, err := t.Fence(e.drv, s); err != nil {
		return fail(call, err)
	}
	Phase("fence")
	e.launch.Return(lease, true)
	e.tel.SyncPoints.Add(1)
	e.tel.H2DBytes.Add(bytes)
	e.tel.UploadOps.Add(1)
	e.tel.Requested.Add(uint64(requested))
	e.tel.DeviceCopies.Add(dmas)
	e.tel.PackedLaunches.Add(1)
	return nil
}

// gatherPacked reads fused readback copies as one packed block: the table
// goes up with one small DMA, one gather launch packs the pieces into device
// staging, one DMA brings them into g's pinned staging, one fence; a
// readback with a drain planned in parts lands them part by part instead
// and copies them out as they land (packedread.go). On
// success g holds the staging and the piece offsets; on failure it holds
// nothing and nothing is leaked. Like uploadPacked it returns errNoPackRoom,
// with nothing queued, when the device staging allocation runs out of memory.
//
// The table is written into a pinned block of its own. Where kernels can
// read pinned host memory (Capabilities.MappedPinnedHost) the gather reads
// it there, over the bus, instead of after a DMA of its own (mappedTables);
// the block stays the call's until the gather has run (the parts' landing
// or the fence says so), like every staging block. Otherwise the table goes
// up with one small DMA. Either way the block the
// pieces land in is taken only once the table's DMA and the gather are
// queued: a block of that size may still be held by the eviction of an
// earlier readback's staging (hostmem's evict.go), which its take waits for, so
// the table work overlaps that eviction. (The data block is also only the
// pieces' size, a smaller pool bucket than pieces and table together.)
//
// Telemetry: DeviceToHostBytes counts the payload, DeviceCopies both DMAs,
// PackedLaunches the gather.
func (e *Engine[E]) gatherPacked(op string, t *Tuning, pl *xferplan.Plan, bufs []E, g *Read, copies []fusion.ReadbackCopy, bytes uint64, requested int) error {
	f, err := e.kernel(op, Gather)
	if err != nil {
		return err
	}
	lay, tab, dev, err := e.gatherTable(op, g, copies)
	if err != nil {
		return err
	}
	defer func() { e.dev.FreeOrKeep(dev) }() // zero once quarantined
	release := func() {
		g.st.ReturnAll()
		g.staged = false
	}
	lease, err := e.launch.Lease(op, false)
	if err != nil {
		release()
		return err
	}
	s := lease.Stream
	Phase("lease")
	abort := func(err error) error {
		e.SyncOrQuarantine(op, InUse[E]{St: []*hostmem.Staging{&g.st}, Dev: []*devmem.Block{&dev}, Bufs: bufs}, lease)
		release()
		return err
	}
	fail := func(call string, err error) error { return abort(errs.Driver(op, call, err)) }
	table, tableDMA := dev.Ptr()+uint64(lay.Table), uint64(1)
	if e.mapsTables && !t.TableDMA {
		// The kernel reads the table where it was written (mappedTables).
		table, tableDMA = hostAddr(tab), 0
	} else if err := e.drv.MemcpyHtoDAsync(table, tab, s); err != nil {
		return fail("MemcpyHtoDAsync", err)
	}
	if err := t.Step(e.drv, s, "table-dma"); err != nil {
		return fail("StreamSynchronize", err)
	}
	args := []driver.KernelArg{{Ptr: dev.Ptr(), IsPtr: true}, {Ptr: table, IsPtr: true}, {U32: uint32(lay.Entries)}}
	if err := e.drv.Launch(f, t.PackLaunch(lay.Entries), s, args); err != nil {
		return fail("Launch", err)
	}
	if err := t.Step(e.drv, s, "launch"); err != nil {
		return fail("StreamSynchronize", err)
	}
	stage, err := g.st.Slice(op, lay.DataEnd)
	if err != nil {
		return abort(err)
	}
	Phase("staging")
	if g.drain != nil && pl.Parts > 1 && len(copies) > 1 {
		g.stage, g.offs = stage, lay.Offs // the copy-out reads them as parts land
		extra, waits, err := e.landPackedParts(op, t, pl, g, &lay, copies, dev.Ptr(), stage, lease)
		if err != nil {
			e.SyncOrQuarantine(op, InUse[E]{St: []*hostmem.Staging{&g.st}, Dev: []*devmem.Block{&dev}, Bufs: bufs}, append(extra, lease)...)
			release()
			return err
		}
		for _, l := range append(extra, lease) {
			e.launch.Return(l, true)
		}
		g.landed = lay.DataEnd
		e.countPackedRead(bytes, requested, waits, tableDMA)
		return nil
	}
	if err := e.drv.MemcpyDtoHAsync(stage, dev.Ptr(), s); err != nil {
		return fail("MemcpyDtoHAsync", err)
	}
	if err := t.Step(e.drv, s, "dma"); err != nil {
		return fail("StreamSynchronize", err)
	}
	if call, err := t.Fence(e.drv, s); err != nil {
		return fail(call, err)
	}
	Phase("fence")
	e.launch.Return(lease, true)
	g.stage, g.landed, g.offs = stage, lay.DataEnd, lay.Offs
	e.countPackedRead(bytes, requested, 1, tableDMA)
	return nil
}

// gatherTable lays copies out in one packed block, takes g's staging with
// a pinned block for the table alone and the device staging for the whole
// block, and writes the table. On failure it holds nothing (errNoPackRoom
// when the device has no memory for the staging).
func (e *Engine[E]) gatherTable(op string, g *Read, copies []fusion.ReadbackCopy) (Layout, []byte, devmem.Block, error) {
	// offs lives in g until release; first only until the table is built.
	offs, first := GetInts(len(copies)), GetInts(len(copies))
	defer PutInts(first)
	lay := NewLayoutIn(*offs, *first, func(i int) int { return copies[i].Len })
	g.ints = append(g.ints, offs)
	if !lay.Packable() {
		return lay, nil, devmem.Block{}, errNoPackRoom
	}
	g.st, g.staged = hostmem.NewStaging(e.host), true
	tab, err := g.st.Slice(op, lay.Total-lay.Table)
	if err != nil {
		g.st.ReturnAll()
		g.staged = false
		return lay, nil, devmem.Block{}, err
	}
	dev, err := e.dev.Alloc(op, lay.Total, true)
	if err != nil {
		g.st.ReturnAll()
		g.staged = false
		return lay, nil, devmem.Block{}, noPackRoom(err)
	}
	for i, c := range copies {
		lay.PutTable(tab, i, c.Src, c.Len)
	}
	Phase("table")
	return lay, tab, dev, nil
}

// countPackedRead adds one packed readback of bytes (requested requests)
// that brought its pieces in parts DMAs to the telemetry: a sync point per
// part (its fence, or each part's landing), a DMA per part and the
// table's (tableDMAs: 0 when the kernel read the table from host memory),
// one gather.
func (e *Engine[E]) countPackedRead(bytes uint64, requested int, parts, tableDMAs uint64) {
	e.tel.SyncPoints.Add(parts)
	e.tel.D2HBytes.Add(bytes)
	e.tel.ReadbackOps.Add(1)
	e.tel.Requested.Add(uint64(requested))
	e.tel.DeviceCopies.Add(tableDMAs + parts)
	e.tel.PackedLaunches.Add(1)
}
