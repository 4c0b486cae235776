package core

import (
	"errors"
	"sync"
	"unsafe"

	"github.com/vyre-go/vyrecuda/core/internal/devmem"
	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
	"github.com/vyre-go/vyrecuda/core/internal/transfer"
	"github.com/vyre-go/vyrecuda/core/kernels"
	"github.com/vyre-go/vyrecuda/cudaapi"
	"github.com/vyre-go/vyrecuda/fusion"
	"github.com/vyre-go/vyrecuda/xferplan"
)

// Many small copies are packed: their bytes and a table of where each goes
// travel in one pinned staging block, with one DMA into a pooled device
// staging allocation and one scatter launch that puts every piece in place
// (readbacks: one gather launch, one DMA back, unpacked on the host). The
// block's layout, its table and the queueing of its parts are
// core/internal/transfer's; this file takes the staging, device memory and
// stream they work on, and accounts for the calls.

// packLayout places pieces in one packed block (transfer.Layout).
type packLayout = transfer.Layout

// phase ends the transfer phase name for the phase hook (transfer.Phase).
func phase(name string) { transfer.Phase(name) }

type packedSet struct{ scatter, gather *Program }

// packedPrograms are the scatter and gather kernels as Programs, so they load
// once per Backend through its module cache (one module: they share an
// image), unload at Close, and run their Go twins on the simulated device.
var packedPrograms = sync.OnceValue(func() packedSet {
	mk := func(entry string, host HostKernel) *Program {
		p, err := NewProgram(ProgramSpec{Image: kernels.ScatterPTX, Entry: entry, Block: transfer.PackBlockThreads,
			Grid: GridRule{Blocks: 1}, Buffers: 2, Scalars: 1, Host: host})
		if err != nil {
			// The specs are constants of this file; a failure is a bug here.
			panic(err)
		}
		return p
	}
	return packedSet{scatter: mk(kernels.ScatterEntry, transfer.ScatterTwin), gather: mk(kernels.GatherEntry, transfer.GatherTwin)}
})

// errNoPackRoom reports that a packed transfer found no device memory for
// its staging allocation, before anything was queued: the caller moves the
// copies by the per-copy path instead, which needs none. The allocation is
// rounded up to a power of two outside the resident budget (8 MiB for 4 MiB
// of data), so a nearly full device can refuse it where per-copy transfers
// still work.
var errNoPackRoom = errors.New("no device memory for packed staging")

// noPackRoom turns an out-of-memory or budget failure of the device staging
// allocation into errNoPackRoom and returns any other error as it is.
func noPackRoom(err error) error {
	var e *Error
	if errors.As(err, &e) && (e.Code == cudaapi.CUDA_ERROR_OUT_OF_MEMORY || e.Kind == KindBudget) {
		return errNoPackRoom
	}
	return err
}

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
func (b *Backend) uploadPacked(op string, t *transferTuning, pl *xferplan.Plan, ents []*residentEntry, fused []fusion.UploadCopy, bytes uint64, requested int) error {
	f, err := b.function(op, packedPrograms().scatter)
	if err != nil {
		return err
	}
	offs, first := transfer.GetInts(len(fused)), transfer.GetInts(len(fused))
	defer transfer.PutInts(offs)
	defer transfer.PutInts(first)
	lay := transfer.NewLayoutIn(*offs, *first, func(i int) int { return len(fused[i].Data) })
	if !lay.Packable() {
		return errNoPackRoom
	}
	st := hostmem.NewStaging(b.hostPool)
	defer st.ReturnAll()
	stage, err := st.Slice(op, lay.Total)
	if err != nil {
		return err
	}
	dev, err := b.devPool.Alloc(op, lay.Total, true)
	if err != nil {
		return noPackRoom(err)
	}
	defer func() { b.devPool.FreeOrKeep(dev) }() // zero once quarantined
	lease, err := b.launch.Lease(op, false)
	if err != nil {
		return err
	}
	s := lease.Stream
	phase("staging")
	fail := func(call string, err error) error {
		b.syncOrQuarantine(op, inUse{st: []*hostmem.Staging{&st}, dev: []*devmem.Block{&dev}, ents: ents}, lease)
		return driverError(op, call, err)
	}
	// Each piece's table entry is written by whoever packs the piece, so
	// the table costs the caller no pass of its own.
	fill := transfer.PackFill(t, &lay, stage, fused, true)
	dmas, call, err := transfer.QueuePacked(b.drv, t, &lay, stage, dev.Ptr(), s, fused, max(min(pl.Parts, len(fused)), 1), pl.Workers, fill)
	if err != nil {
		return fail(call, err)
	}
	args := []KernelArg{{Ptr: dev.Ptr(), IsPtr: true}, {Ptr: dev.Ptr() + uint64(lay.Table), IsPtr: true}, {U32: uint32(lay.Entries)}}
	if err := b.drv.Launch(f, t.PackLaunch(lay.Entries), s, args); err != nil {
		return fail("Launch", err)
	}
	if err := t.Step(b.drv, s, "launch"); err != nil {
		return fail("StreamSynchronize", err)
	}
	if call, err := t.Fence(b.drv, s); err != nil {
		return fail(call, err)
	}
	phase("fence")
	b.launch.Return(lease, true)
	b.tel.SyncPoints.Add(1)
	b.tel.H2DBytes.Add(bytes)
	b.tel.UploadOps.Add(1)
	b.tel.Requested.Add(uint64(requested))
	b.tel.DeviceCopies.Add(dmas)
	b.tel.PackedLaunches.Add(1)
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
func (b *Backend) gatherPacked(op string, t *transferTuning, pl *xferplan.Plan, ents []*residentEntry, g *gathered, copies []fusion.ReadbackCopy, bytes uint64, requested int) error {
	f, err := b.function(op, packedPrograms().gather)
	if err != nil {
		return err
	}
	lay, tab, dev, err := b.gatherTable(op, g, copies)
	if err != nil {
		return err
	}
	defer func() { b.devPool.FreeOrKeep(dev) }() // zero once quarantined
	release := func() {
		g.st.ReturnAll()
		g.staged = false
	}
	lease, err := b.launch.Lease(op, false)
	if err != nil {
		release()
		return err
	}
	s := lease.Stream
	phase("lease")
	abort := func(err error) error {
		b.syncOrQuarantine(op, inUse{st: []*hostmem.Staging{&g.st}, dev: []*devmem.Block{&dev}, ents: ents}, lease)
		release()
		return err
	}
	fail := func(call string, err error) error { return abort(driverError(op, call, err)) }
	table, tableDMA := dev.Ptr()+uint64(lay.Table), uint64(1)
	if b.mapsTables && !t.TableDMA {
		// The kernel reads the table where it was written (mappedTables).
		table, tableDMA = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(tab)))), 0
	} else if err := b.drv.MemcpyHtoDAsync(table, tab, s); err != nil {
		return fail("MemcpyHtoDAsync", err)
	}
	if err := t.Step(b.drv, s, "table-dma"); err != nil {
		return fail("StreamSynchronize", err)
	}
	args := []KernelArg{{Ptr: dev.Ptr(), IsPtr: true}, {Ptr: table, IsPtr: true}, {U32: uint32(lay.Entries)}}
	if err := b.drv.Launch(f, t.PackLaunch(lay.Entries), s, args); err != nil {
		return fail("Launch", err)
	}
	if err := t.Step(b.drv, s, "launch"); err != nil {
		return fail("StreamSynchronize", err)
	}
	stage, err := g.st.Slice(op, lay.DataEnd)
	if err != nil {
		return abort(err)
	}
	phase("staging")
	if g.drain != nil && pl.Parts > 1 && len(copies) > 1 {
		g.stage, g.offs = stage, lay.Offs // the copy-out reads them as parts land
		extra, waits, err := b.landPackedParts(op, t, pl, g, &lay, copies, dev.Ptr(), stage, lease)
		if err != nil {
			b.syncOrQuarantine(op, inUse{st: []*hostmem.Staging{&g.st}, dev: []*devmem.Block{&dev}, ents: ents}, append(extra, lease)...)
			release()
			return err
		}
		for _, l := range append(extra, lease) {
			b.launch.Return(l, true)
		}
		g.landed = lay.DataEnd
		b.countPackedRead(bytes, requested, waits, tableDMA)
		return nil
	}
	if err := b.drv.MemcpyDtoHAsync(stage, dev.Ptr(), s); err != nil {
		return fail("MemcpyDtoHAsync", err)
	}
	if err := t.Step(b.drv, s, "dma"); err != nil {
		return fail("StreamSynchronize", err)
	}
	if call, err := t.Fence(b.drv, s); err != nil {
		return fail(call, err)
	}
	phase("fence")
	b.launch.Return(lease, true)
	g.stage, g.landed, g.offs = stage, lay.DataEnd, lay.Offs
	b.countPackedRead(bytes, requested, 1, tableDMA)
	return nil
}

// gatherTable lays copies out in one packed block, takes g's staging with
// a pinned block for the table alone and the device staging for the whole
// block, and writes the table. On failure it holds nothing (errNoPackRoom
// when the device has no memory for the staging).
func (b *Backend) gatherTable(op string, g *gathered, copies []fusion.ReadbackCopy) (packLayout, []byte, devmem.Block, error) {
	// offs lives in g until release; first only until the table is built.
	offs, first := transfer.GetInts(len(copies)), transfer.GetInts(len(copies))
	defer transfer.PutInts(first)
	lay := transfer.NewLayoutIn(*offs, *first, func(i int) int { return copies[i].Len })
	g.ints = append(g.ints, offs)
	if !lay.Packable() {
		return lay, nil, devmem.Block{}, errNoPackRoom
	}
	g.st, g.staged = hostmem.NewStaging(b.hostPool), true
	tab, err := g.st.Slice(op, lay.Total-lay.Table)
	if err != nil {
		g.st.ReturnAll()
		g.staged = false
		return lay, nil, devmem.Block{}, err
	}
	dev, err := b.devPool.Alloc(op, lay.Total, true)
	if err != nil {
		g.st.ReturnAll()
		g.staged = false
		return lay, nil, devmem.Block{}, noPackRoom(err)
	}
	for i, c := range copies {
		lay.PutTable(tab, i, c.Src, c.Len)
	}
	phase("table")
	return lay, tab, dev, nil
}

// countPackedRead adds one packed readback of bytes (requested requests)
// that brought its pieces in parts DMAs to the telemetry: a sync point per
// part (its fence, or each part's landing), a DMA per part and the
// table's (tableDMAs: 0 when the kernel read the table from host memory),
// one gather.
func (b *Backend) countPackedRead(bytes uint64, requested int, parts, tableDMAs uint64) {
	b.tel.SyncPoints.Add(parts)
	b.tel.D2HBytes.Add(bytes)
	b.tel.ReadbackOps.Add(1)
	b.tel.Requested.Add(uint64(requested))
	b.tel.DeviceCopies.Add(tableDMAs + parts)
	b.tel.PackedLaunches.Add(1)
}

// mappedTables reports whether drv's kernels read memory from HostAlloc at
// its host address (Capabilities.MappedPinnedHost), so a packed readback's
// gather can read its table from the pinned block the host wrote it into.
// That saves the table's DMA, whose queueing took 6.3-7.8 us of W3's call
// on the reference H100 host; the gather's reads over the bus made its
// parts land about 6 us later, so the gain is small but steady: W3 in 181-233
// us against 183-252 and W7D in 1.37-1.39 ms against 1.41-1.47 (vyrecuda
// bench, 100 runs, four alternations, every pair in the same direction).
func mappedTables(drv Driver) bool {
	cr, ok := drv.(CapabilityReporter)
	return ok && cr.Capabilities().MappedPinnedHost
}
