package core

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
	"unsafe"

	"github.com/vyre-go/vyrecuda/core/internal/copyjob"
	"github.com/vyre-go/vyrecuda/core/kernels"
	"github.com/vyre-go/vyrecuda/cudaapi"
	"github.com/vyre-go/vyrecuda/fusion"
	"github.com/vyre-go/vyrecuda/internal/ntcopy"
	"github.com/vyre-go/vyrecuda/xferplan"
)

// Many small copies are packed: their bytes and a table of where each goes
// travel in one pinned staging block, with one DMA into a pooled device
// staging allocation and one scatter launch that puts every piece in place
// (readbacks: one gather launch, one DMA back, unpacked on the host). On the
// reference H100 1024 separate 4 KiB copies cost 2.7 ms (about 2.6 us of
// driver work each); the packed form, packed on 16 goroutines with
// non-temporal stores while earlier parts' DMAs run, 0.18 ms: about 42 us
// of host bookkeeping, 50 us of packing and 84 us waiting for the DMAs and
// the scatter (core's BenchmarkGPUW1Phases).
const (
	// packAlign aligns each piece and the table in the packed block, so the
	// kernel moves 16-byte words when the device side is aligned too.
	packAlign = 16
	// packBlockThreads is the threads per block of the scatter and gather
	// launches: one 16-byte word each for a 4 KiB piece. The kernel is not
	// where W1/W3 time goes (launch plus kernel ~20 us of ~420 on an H200
	// host); 128 threads, 512 threads with 512 blocks and 256 blocks (four
	// entries each) all measured within run-to-run spread of 256.
	packBlockThreads = 256
	// packMaxGrid caps the grid; the kernels stride over the entries.
	packMaxGrid = 65535
	// streamTaskWeight bounds the bytes of one task of a packed upload in
	// parts (streamParts): about 20 us of copying on one thread, so the
	// calling goroutine, which also queues each part's DMA as soon as the
	// part is packed, leaves the DMA engine idle for at most that long. With
	// a task per worker's share instead (1 MiB and more for 2048 buffers of
	// 16 B-256 KiB), a part's DMA waited for the caller's whole task.
	streamTaskWeight = 256 << 10
)

// packEntryBytes bounds the bytes of one table entry. The kernels give
// each entry one thread block, which moves 16-byte words only when the
// entry's length and both addresses are multiples of 16 and single bytes
// otherwise: one entry per piece kept a 256 KiB piece of odd length on one
// block moving bytes, and the scatter of W7 (2048 pieces of 16 B-256 KiB)
// took about 420 us on the reference H100. Each piece's 16-byte-multiple
// body is therefore split into entries of at most packEntryBytes, spread
// over many blocks, and its last len%16 bytes get an entry of their own.
const packEntryBytes = 16 << 10

// pieceEntries is the number of table entries of a piece of n bytes.
func pieceEntries(n int) int {
	body := n &^ (packAlign - 1)
	k := (body + packEntryBytes - 1) / packEntryBytes
	if body < n {
		k++
	}
	return k
}

// packLayout places pieces in one block: piece i at offs[i] (16-byte
// aligned), the data ending at dataEnd, then the table at table, entries
// entries of which piece i's start at first[i], total bytes in all.
type packLayout struct {
	offs    []int
	first   []int
	dataEnd int
	table   int
	entries int
	total   int
}

func newPackLayout(n int, length func(i int) int) packLayout {
	return newPackLayoutIn(make([]int, n), make([]int, n), length)
}

// newPackLayoutIn is newPackLayout placing len(offs) pieces into offs and
// first (of the same length).
func newPackLayoutIn(offs, first []int, length func(i int) int) packLayout {
	first = first[:len(offs)]
	off, ents, end := 0, 0, 0
	for i := range offs {
		n := length(i)
		offs[i], first[i] = off, ents
		ents += pieceEntries(n)
		end = off + n
		off = alignUp(end, packAlign)
	}
	return packLayout{offs: offs, first: first, dataEnd: end, table: off, entries: ents,
		total: off + ents*kernels.TableEntryBytes}
}

func alignUp(n, a int) int { return (n + a - 1) &^ (a - 1) }

// putEntries writes the table entries of piece i: n bytes between device
// address addr and the piece's place in the block.
func (l *packLayout) putEntries(stage []byte, i int, addr uint64, n int) {
	l.putTable(stage[l.table:], i, addr, n)
}

// putTable is putEntries into tab, the table alone. Most pieces take one
// entry, written without the splitting loop: with that and newPackLayoutIn
// keeping its sums in locals, W3's table phase (1024 pieces) took 16.5-17.1
// us against 21.3-21.5 on the reference H100 host (BenchmarkGPUW3Phases,
// three alternations).
func (l *packLayout) putTable(tab []byte, i int, addr uint64, n int) {
	e := l.first[i] * kernels.TableEntryBytes
	body := n &^ (packAlign - 1)
	if body == n && n > 0 && n <= packEntryBytes {
		// The usual piece: one entry, no tail.
		putEntry(tab[e:], addr, l.offs[i], n)
		return
	}
	for k := 0; k < body; k += packEntryBytes {
		putEntry(tab[e:], addr+uint64(k), l.offs[i]+k, min(packEntryBytes, body-k))
		e += kernels.TableEntryBytes
	}
	if body < n {
		putEntry(tab[e:], addr+uint64(body), l.offs[i]+body, n-body)
	}
}

// putEntry writes one table entry at the start of e.
func putEntry(e []byte, addr uint64, off, n int) {
	_ = e[kernels.TableEntryBytes-1] // one bounds check for the three words
	binary.LittleEndian.PutUint64(e[0:], addr)
	binary.LittleEndian.PutUint64(e[8:], uint64(off))
	binary.LittleEndian.PutUint64(e[16:], uint64(n))
}

// packable reports whether the kernels can take l's entries (their count
// is a 32-bit parameter).
func (l *packLayout) packable() bool { return l.entries <= math.MaxUint32 }

// packLaunch is the geometry of a scatter or gather over n entries.
func (t *transferTuning) packLaunch(n int) LaunchConfig {
	return LaunchConfig{Grid: [3]uint32{uint32(min(n, t.packGrid)), 1, 1}, Block: [3]uint32{uint32(t.packBlock), 1, 1}}
}

// phaseHook, when set (tests only), is called with the name of each phase
// of a packed transfer as it ends, so a benchmark can time the phases.
// It is nil otherwise: one load and branch per phase.
var phaseHook func(phase string)

func phase(name string) {
	if h := phaseHook; h != nil {
		h(name)
	}
}

// packFenceSpin is how long a packed call polls StreamQuery before it
// blocks in StreamSynchronize; < 0: it blocks at once.
const packFenceSpin = -1

// fence waits for everything queued on s, first polling for up to
// t.fenceSpin, then with StreamSynchronize (which returns at once when the
// polling saw the stream done, and reports any error of its work).
func (b *Backend) fence(t *transferTuning, s Stream) (string, error) {
	if t.fenceSpin > 0 {
		until := time.Now().Add(t.fenceSpin)
		for {
			done, err := b.drv.StreamQuery(s)
			if err != nil {
				return "StreamQuery", err
			}
			if done || time.Now().After(until) {
				break
			}
		}
	}
	return "StreamSynchronize", b.drv.StreamSynchronize(s)
}

// step fences s after a queued operation when t.syncEach is set (tests
// only), so the phase times hold each operation's device time.
func (b *Backend) step(t *transferTuning, s Stream, name string) error {
	if t.syncEach {
		if err := b.drv.StreamSynchronize(s); err != nil {
			return err
		}
	}
	phase(name)
	return nil
}

type packedSet struct{ scatter, gather *Program }

// packedPrograms are the scatter and gather kernels as Programs, so they load
// once per Backend through its module cache (one module: they share an
// image), unload at Close, and run their Go twins on the simulated device.
var packedPrograms = sync.OnceValue(func() packedSet {
	mk := func(entry string, host HostKernel) *Program {
		p, err := NewProgram(ProgramSpec{Image: kernels.ScatterPTX, Entry: entry, Block: packBlockThreads,
			Grid: GridRule{Blocks: 1}, Buffers: 2, Scalars: 1, Host: host})
		if err != nil {
			// The specs are constants of this file; a failure is a bug here.
			panic(err)
		}
		return p
	}
	return packedSet{scatter: mk(kernels.ScatterEntry, scatterTwin), gather: mk(kernels.GatherEntry, gatherTwin)}
})

// scatterTwin is vyre_scatter on the simulated device: (packed, table, count).
func scatterTwin(mem KernelMemory, _ LaunchConfig, args []KernelArg) error {
	return packedTwin(kernels.ScatterEntry, mem, args, true)
}

// gatherTwin is vyre_gather on the simulated device: (packed, table, count).
func gatherTwin(mem KernelMemory, _ LaunchConfig, args []KernelArg) error {
	return packedTwin(kernels.GatherEntry, mem, args, false)
}

// packedTwin walks the table as the kernels do: entry {addr, off, len} moves
// len bytes between addr and packed+off, towards addr when scatter is set.
func packedTwin(name string, mem KernelMemory, args []KernelArg, scatter bool) error {
	if len(args) != 3 || !args[0].IsPtr || !args[1].IsPtr || args[2].IsPtr {
		return fmt.Errorf("%s: want parameters (packed pointer, table pointer, u32 count)", name)
	}
	packed, count := args[0].Ptr, int(args[2].U32)
	if count > math.MaxInt/kernels.TableEntryBytes {
		return fmt.Errorf("%s: %d entries overflow", name, count)
	}
	table, err := mem.Bytes(args[1].Ptr, count*kernels.TableEntryBytes)
	if err != nil {
		return fmt.Errorf("%s: table: %w", name, err)
	}
	for e := range count {
		t := table[e*kernels.TableEntryBytes:]
		addr, off, n := binary.LittleEndian.Uint64(t), binary.LittleEndian.Uint64(t[8:]), binary.LittleEndian.Uint64(t[16:])
		if n > math.MaxInt || off > math.MaxUint64-packed {
			return fmt.Errorf("%s: entry %d: %d bytes at packed offset %d overflow", name, e, n, off)
		}
		dev, err := mem.Bytes(addr, int(n))
		if err != nil {
			return fmt.Errorf("%s: entry %d: device side: %w", name, e, err)
		}
		pk, err := mem.Bytes(packed+off, int(n))
		if err != nil {
			return fmt.Errorf("%s: entry %d: packed side: %w", name, e, err)
		}
		if scatter {
			copy(dev, pk)
		} else {
			copy(pk, dev)
		}
	}
	return nil
}

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
	offs, first := getInts(len(fused)), getInts(len(fused))
	defer putInts(offs)
	defer putInts(first)
	lay := newPackLayoutIn(*offs, *first, func(i int) int { return len(fused[i].Data) })
	if !lay.packable() {
		return errNoPackRoom
	}
	st := newStaging(b.hostPool)
	defer st.release()
	stage, err := st.take(op, lay.total)
	if err != nil {
		return err
	}
	dev, err := b.devPool.get(op, lay.total, true)
	if err != nil {
		return noPackRoom(err)
	}
	defer func() { b.devPool.put(dev) }() // zero once quarantined
	lease, err := b.lease(op, false)
	if err != nil {
		return err
	}
	s := lease.Stream
	phase("staging")
	fail := func(call string, err error) error {
		b.drain(op, held{st: []*staging{&st}, dev: []*deviceAlloc{&dev}, ents: ents}, lease)
		return driverError(op, call, err)
	}
	// Each piece's table entry is written by whoever packs the piece, so
	// the table costs the caller no pass of its own. Pieces are copied
	// with non-temporal stores (internal/ntcopy), so the DMA that follows
	// reads them from memory rather than from other cores' caches.
	fill := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			if t.plainPack {
				copy(stage[lay.offs[i]:], fused[i].Data)
			} else {
				ntcopy.Copy(stage[lay.offs[i]:], fused[i].Data)
			}
			lay.putEntries(stage, i, fused[i].Dst, len(fused[i].Data))
		}
		ntcopy.Fence()
	}
	dmas, call, err := b.queuePackedParts(t, &lay, stage, dev.ptr, s, fused, max(min(pl.Parts, len(fused)), 1), pl.Workers, fill)
	if err != nil {
		return fail(call, err)
	}
	args := []KernelArg{{Ptr: dev.ptr, IsPtr: true}, {Ptr: dev.ptr + uint64(lay.table), IsPtr: true}, {U32: uint32(lay.entries)}}
	if err := b.drv.Launch(f, t.packLaunch(lay.entries), s, args); err != nil {
		return fail("Launch", err)
	}
	if err := b.step(t, s, "launch"); err != nil {
		return fail("StreamSynchronize", err)
	}
	if call, err := b.fence(t, s); err != nil {
		return fail(call, err)
	}
	phase("fence")
	b.launch.giveBack(lease, true)
	b.tel.syncPoints.Add(1)
	b.tel.h2dBytes.Add(bytes)
	b.tel.uploadOps.Add(1)
	b.tel.requested.Add(uint64(requested))
	b.tel.deviceCopies.Add(dmas)
	b.tel.packedLaunches.Add(1)
	return nil
}

// queuePackedParts packs a packed upload's block and queues its DMAs on s.
// With one part the pieces are packed on w goroutines and the whole block
// (table included) goes in one DMA. With several, w goroutines sharing one
// copy job fill the parts in order (fill(lo, hi) packs pieces [lo, hi) and
// their table entries) and each part's DMA is queued as soon as it is
// packed, so packing later parts overlaps the DMAs of earlier ones; the
// table, complete only then, goes with the last part. It returns the DMAs
// queued, or the failed call and its error.
func (b *Backend) queuePackedParts(t *transferTuning, lay *packLayout, stage []byte, dev uint64, s Stream,
	fused []fusion.UploadCopy, parts, w int, fill func(lo, hi int)) (uint64, string, error) {
	start := func(i int) int { return lay.offs[i] }
	if parts == 1 {
		copyjob.ForParts(len(fused), w, t.linger, start, lay.dataEnd, fill)
		phase("pack")
		if err := b.drv.MemcpyHtoDAsync(dev, stage, s); err != nil {
			return 0, "MemcpyHtoDAsync", err
		}
		if err := b.step(t, s, "dma"); err != nil {
			return 0, "StreamSynchronize", err
		}
		return 1, "", nil
	}
	dmas := uint64(0)
	err := streamParts(len(fused), parts, w, t.linger, start, lay.dataEnd, fill,
		func(k, lo, hi int) error {
			if k == parts-1 {
				// Every piece is packed, so the table is complete: it goes
				// with the last part (which may be empty).
				start := lay.table
				if lo < hi {
					start = lay.offs[lo]
				}
				dmas++
				return b.drv.MemcpyHtoDAsync(dev+uint64(start), stage[start:], s)
			}
			if lo == hi {
				return nil
			}
			start, end := lay.offs[lo], lay.offs[hi-1]+len(fused[hi-1].Data)
			dmas++
			return b.drv.MemcpyHtoDAsync(dev+uint64(start), stage[start:end:end], s)
		})
	if err != nil {
		return 0, "MemcpyHtoDAsync", err
	}
	phase("pack")
	if err := b.step(t, s, "dma"); err != nil {
		return 0, "StreamSynchronize", err
	}
	return dmas, "", nil
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
// earlier readback's staging (evictjob.go), which its take waits for, so
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
	defer func() { b.devPool.put(dev) }() // zero once quarantined
	release := func() {
		g.st.release()
		g.staged = false
	}
	lease, err := b.lease(op, false)
	if err != nil {
		release()
		return err
	}
	s := lease.Stream
	phase("lease")
	abort := func(err error) error {
		b.drain(op, held{st: []*staging{&g.st}, dev: []*deviceAlloc{&dev}, ents: ents}, lease)
		release()
		return err
	}
	fail := func(call string, err error) error { return abort(driverError(op, call, err)) }
	table, tableDMA := dev.ptr+uint64(lay.table), uint64(1)
	if b.mapsTables && !t.tableDMA {
		// The kernel reads the table where it was written (mappedTables).
		table, tableDMA = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(tab)))), 0
	} else if err := b.drv.MemcpyHtoDAsync(table, tab, s); err != nil {
		return fail("MemcpyHtoDAsync", err)
	}
	if err := b.step(t, s, "table-dma"); err != nil {
		return fail("StreamSynchronize", err)
	}
	args := []KernelArg{{Ptr: dev.ptr, IsPtr: true}, {Ptr: table, IsPtr: true}, {U32: uint32(lay.entries)}}
	if err := b.drv.Launch(f, t.packLaunch(lay.entries), s, args); err != nil {
		return fail("Launch", err)
	}
	if err := b.step(t, s, "launch"); err != nil {
		return fail("StreamSynchronize", err)
	}
	stage, err := g.st.take(op, lay.dataEnd)
	if err != nil {
		return abort(err)
	}
	phase("staging")
	if g.drain != nil && pl.Parts > 1 && len(copies) > 1 {
		g.stage, g.offs = stage, lay.offs // the copy-out reads them as parts land
		extra, waits, err := b.landPackedParts(op, t, pl, g, &lay, copies, dev.ptr, stage, lease)
		if err != nil {
			b.drain(op, held{st: []*staging{&g.st}, dev: []*deviceAlloc{&dev}, ents: ents}, append(extra, lease)...)
			release()
			return err
		}
		for _, l := range append(extra, lease) {
			b.launch.giveBack(l, true)
		}
		g.landed = lay.dataEnd
		b.countPackedRead(bytes, requested, waits, tableDMA)
		return nil
	}
	if err := b.drv.MemcpyDtoHAsync(stage, dev.ptr, s); err != nil {
		return fail("MemcpyDtoHAsync", err)
	}
	if err := b.step(t, s, "dma"); err != nil {
		return fail("StreamSynchronize", err)
	}
	if call, err := b.fence(t, s); err != nil {
		return fail(call, err)
	}
	phase("fence")
	b.launch.giveBack(lease, true)
	g.stage, g.landed, g.offs = stage, lay.dataEnd, lay.offs
	b.countPackedRead(bytes, requested, 1, tableDMA)
	return nil
}

// gatherTable lays copies out in one packed block, takes g's staging with
// a pinned block for the table alone and the device staging for the whole
// block, and writes the table. On failure it holds nothing (errNoPackRoom
// when the device has no memory for the staging).
func (b *Backend) gatherTable(op string, g *gathered, copies []fusion.ReadbackCopy) (packLayout, []byte, deviceAlloc, error) {
	// offs lives in g until release; first only until the table is built.
	offs, first := getInts(len(copies)), getInts(len(copies))
	defer putInts(first)
	lay := newPackLayoutIn(*offs, *first, func(i int) int { return copies[i].Len })
	g.ints = append(g.ints, offs)
	if !lay.packable() {
		return lay, nil, deviceAlloc{}, errNoPackRoom
	}
	g.st, g.staged = newStaging(b.hostPool), true
	tab, err := g.st.take(op, lay.total-lay.table)
	if err != nil {
		g.st.release()
		g.staged = false
		return lay, nil, deviceAlloc{}, err
	}
	dev, err := b.devPool.get(op, lay.total, true)
	if err != nil {
		g.st.release()
		g.staged = false
		return lay, nil, deviceAlloc{}, noPackRoom(err)
	}
	for i, c := range copies {
		lay.putTable(tab, i, c.Src, c.Len)
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
	b.tel.syncPoints.Add(parts)
	b.tel.d2hBytes.Add(bytes)
	b.tel.readbackOps.Add(1)
	b.tel.requested.Add(uint64(requested))
	b.tel.deviceCopies.Add(tableDMAs + parts)
	b.tel.packedLaunches.Add(1)
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
