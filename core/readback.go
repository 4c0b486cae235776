package core

import (
	"fmt"
	"math"
	"sort"

	"github.com/vyre-go/vyrecuda/accounting"
	"github.com/vyre-go/vyrecuda/core/internal/copyjob"
	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
	"github.com/vyre-go/vyrecuda/core/internal/transfer"
	"github.com/vyre-go/vyrecuda/fusion"
	"github.com/vyre-go/vyrecuda/internal/ntcopy"
	"github.com/vyre-go/vyrecuda/xferplan"
)

// Range names Len bytes of Buf starting at byte Offset.
type Range struct {
	Buf         Buffer
	Offset, Len int
}

// DownloadResident reads the whole of h into a new slice.
func (b *Backend) DownloadResident(h Buffer) ([]byte, error) {
	const op = "DownloadResident"
	if err := b.enter(op); err != nil {
		return nil, err
	}
	defer b.exit()
	return b.readOne(op, Range{Buf: h, Len: h.Len}, nil, false)
}

// DownloadResidentInto reads the whole of h into dst's storage, growing it
// only when its capacity is too small, and returns the result (append-style:
// use the returned slice). On failure it returns dst unchanged, and the
// bytes of dst's storage are unchanged too, with two exceptions:
//   - a device failure in the middle of a staged transfer (the planner
//     stages single reads from 256 KiB, writing each chunk into dst's
//     storage as it arrives) may leave a prefix of that storage holding h's
//     bytes;
//   - when dst's storage lies inside memory pinned through this Backend
//     (AllocHostPinned, PinHostBuffer), the device copies into it directly,
//     and after a failure any of its first h.Len bytes may hold h's bytes.
//     If the failure also left the copy's stream unsynchronized (the Backend
//     quarantines it; see Close), the copy may still write them after
//     DownloadResidentInto returned, at any moment until a later call on
//     the Backend synchronizes that stream. Until then the memory stays in
//     use: PinnedBuffer.Free and UnpinHostBuffer refuse it with ErrInFlight,
//     and if the stream never synchronizes Close leaves it pinned. After a
//     failed direct read, use that memory for nothing else until Free or
//     UnpinHostBuffer succeeds.
func (b *Backend) DownloadResidentInto(h Buffer, dst []byte) ([]byte, error) {
	const op = "DownloadResidentInto"
	if err := b.enter(op); err != nil {
		return dst, err
	}
	defer b.exit()
	return b.readOne(op, Range{Buf: h, Len: h.Len}, dst, true)
}

// DownloadResidentMany reads every buffer in hs with one fence and returns
// one new slice per handle, in order. Each slice's capacity is its length,
// so writing or appending to one never changes another; the slices of
// small buffers may share one allocation of up to 1 MiB, which stays
// alive while any of them does. A loop of readbacks is faster with
// DownloadResidentManyInto, which reuses the storage it returned last
// time: new memory is cold, and the process may have to fault its pages
// in (W3's shape on the reference H100 host: 1.15-1.79 ms a call into new
// slices, against 0.19-0.30 ms into reused ones).
func (b *Backend) DownloadResidentMany(hs []Buffer) ([][]byte, error) {
	const op = "DownloadResidentMany"
	if err := b.enter(op); err != nil {
		return nil, err
	}
	defer b.exit()
	out := make([][]byte, len(hs))
	g, err := b.gather(op, len(hs), func(i int) Range { return Range{Buf: hs[i], Len: hs[i].Len} }, nil, nil,
		transfer.FreshDrain(out))
	if err != nil {
		return nil, err
	}
	defer g.release()
	g.drainAll()
	return out, nil
}

// DownloadResidentManyInto reads every buffer in hs with one fence into the
// slots of dst: slot i reuses the capacity of dst's i-th slice (and dst's own
// capacity is reused for the slots), append-style. On failure it returns dst
// unchanged, with every slot's header as it was. The bytes of the slots
// are unchanged too unless the device fails in the middle of a large
// readback: those move in parts, each buffer's bytes reaching its slot as
// soon as their part has landed, so such a failure may leave some slots'
// storage holding all of their buffer's bytes (the others keep theirs).
// WithAtomicReadbacks rules that out, at the cost of the overlap.
func (b *Backend) DownloadResidentManyInto(hs []Buffer, dst [][]byte) ([][]byte, error) {
	const op = "DownloadResidentManyInto"
	if err := b.enter(op); err != nil {
		return dst, err
	}
	defer b.exit()
	res := transfer.GetSlots(len(hs))
	defer transfer.PutSlots(res)
	g, err := b.gather(op, len(hs), func(i int) Range { return Range{Buf: hs[i], Len: hs[i].Len} }, nil, nil,
		transfer.SlotDrain(dst, *res))
	if err != nil {
		return dst, err
	}
	defer g.release()
	g.drainAll()
	out := transfer.GrowSlots(dst, len(hs))
	copy(out, *res)
	phase("unpack")
	return out, nil
}

// DownloadResidentRange reads n bytes of h starting at byte off into a new
// slice. A zero-length range gives an empty slice without touching the device.
func (b *Backend) DownloadResidentRange(h Buffer, off, n int) ([]byte, error) {
	const op = "DownloadResidentRange"
	if err := b.enter(op); err != nil {
		return nil, err
	}
	defer b.exit()
	return b.readOne(op, Range{Buf: h, Offset: off, Len: n}, nil, false)
}

// DownloadResidentRangesInto reads every range with one fence into the slots
// of dst, append-style as in DownloadResidentManyInto. Overlapping and
// touching ranges of one buffer are read once. On failure it returns dst
// unchanged, as DownloadResidentManyInto says.
func (b *Backend) DownloadResidentRangesInto(rs []Range, dst [][]byte) ([][]byte, error) {
	const op = "DownloadResidentRangesInto"
	if err := b.enter(op); err != nil {
		return dst, err
	}
	defer b.exit()
	res := transfer.GetSlots(len(rs))
	defer transfer.PutSlots(res)
	g, err := b.gather(op, len(rs), func(i int) Range { return rs[i] }, nil, nil, transfer.SlotDrain(dst, *res))
	if err != nil {
		return dst, err
	}
	defer g.release()
	g.drainAll()
	out := transfer.GrowSlots(dst, len(rs))
	copy(out, *res)
	return out, nil
}

// DownloadResidentBatchesInto reads several batches of ranges with one fence
// for all of them: result[i][j] holds batches[i][j]. Every level reuses the
// capacity of dst, append-style. On failure it returns dst unchanged.
func (b *Backend) DownloadResidentBatchesInto(batches [][]Range, dst [][][]byte) ([][][]byte, error) {
	const op = "DownloadResidentBatchesInto"
	if err := b.enter(op); err != nil {
		return dst, err
	}
	defer b.exit()
	total := 0
	for i, batch := range batches {
		t, err := accounting.AddLen(total, len(batch))
		if err != nil {
			return dst, &Error{Op: op, Kind: KindInvalidArgument,
				Detail: fmt.Sprintf("batch %d brings the range count past %d", i, math.MaxInt),
				Fix:    "split the batches", Err: err}
		}
		total = t
	}
	flat := make([]Range, 0, total)
	for _, batch := range batches {
		flat = append(flat, batch...)
	}
	starts := make([]int, len(batches))
	for i := 1; i < len(batches); i++ {
		starts[i] = starts[i-1] + len(batches[i-1])
	}
	label := func(i int) string {
		bi := sort.Search(len(starts), func(k int) bool { return starts[k] > i }) - 1
		return fmt.Sprintf("batch %d item %d: ", bi, i-starts[bi])
	}
	res := transfer.GetSlots(total)
	defer transfer.PutSlots(res)
	g, err := b.gather(op, total, func(i int) Range { return flat[i] }, label, nil,
		&transfer.Drain{Dest: batchDest(dst, starts), Res: *res})
	if err != nil {
		return dst, err
	}
	defer g.release()
	g.drainAll()
	out := transfer.GrowSlots(dst, len(batches))
	for i, batch := range batches {
		out[i] = transfer.GrowSlots(out[i], len(batch))
		copy(out[i], (*res)[starts[i]:])
	}
	return out, nil
}

// batchDest is the drain dest of DownloadResidentBatchesInto: flat request
// i, item i-starts[k] of batch k, reuses that slot of dst as
// transfer.SlotDest does.
func batchDest(dst [][][]byte, starts []int) func(i, n int) []byte {
	batches := dst[:cap(dst)]
	return func(i, n int) []byte {
		k := sort.Search(len(starts), func(k int) bool { return starts[k] > i }) - 1
		var slots [][]byte
		if k < len(batches) {
			slots = batches[k][:cap(batches[k])]
		}
		return transfer.ReuseSlot(slots, i-starts[k], n)
	}
}

// readOne reads r for the single-range calls: into dst's storage,
// append-style, when reuse is set (growing it only when its capacity is too
// small), else into a new slice. A staged or direct plan moves the bytes
// straight into that output; a per-copy one stages them whole and copies
// them out on the plan's goroutines. On failure it returns dst.
func (b *Backend) readOne(op string, r Range, dst []byte, reuse bool) ([]byte, error) {
	output := func(n int) []byte {
		if reuse && cap(dst) >= n {
			return dst[:n]
		}
		return make([]byte, n)
	}
	g, err := b.gather(op, 1, func(int) Range { return r }, nil, output, nil)
	if err != nil {
		return dst, err
	}
	defer g.release()
	if g.direct != nil {
		return g.direct, nil
	}
	src := g.bytes(0)
	out := g.out
	if out == nil {
		out = output(len(src))
	}
	copyjob.ParallelCopy(out, src, g.plan.Workers, g.tune.Linger, copyOut)
	g.unpacked = true // release evicts the staging
	phase("unpack")
	return out, nil
}

// pinRanges looks up and validates len(ents) ranges in one pass under the
// store lock, filling ents, lens and reqs, and marks every buffer in flight
// only when all of them passed: an unknown handle anywhere is reported
// before a bad range. It returns how many ranges are not empty.
func (b *Backend) pinRanges(op string, at func(i int) Range, label func(i int) string, lens []int,
	ents []*residentEntry, reqs []fusion.ReadbackCopy) (int, error) {
	nonEmpty, bad := 0, -1
	b.store.mu.RLock()
	for i := range ents {
		r := at(i)
		// The usual range (a live handle, a range that fits) takes no call.
		if e := b.store.table.get(r.Buf.ID); e != nil && e.n == r.Buf.Len && bad < 0 &&
			readFits(r, e.ptr) {
			ents[i] = e
			lens[i] = r.Len
			reqs[i] = fusion.ReadbackCopy{Handle: r.Buf.ID}
			if r.Len > 0 {
				reqs[i].Src, reqs[i].Len = e.ptr+uint64(r.Offset), r.Len
				nonEmpty++
			}
			continue
		}
		e, herr := b.store.lookup(op, r.Buf)
		if herr != nil {
			b.store.mu.RUnlock()
			herr.Detail = label(i) + herr.Detail
			return 0, herr
		}
		ents[i] = e
		if bad >= 0 {
			continue
		}
		if readRangeError(op, label, i, r, e.ptr) != nil {
			bad = i
			continue
		}
		lens[i] = r.Len
		reqs[i] = fusion.ReadbackCopy{Handle: r.Buf.ID}
		if r.Len > 0 {
			reqs[i].Src, reqs[i].Len = e.ptr+uint64(r.Offset), r.Len
			nonEmpty++
		}
	}
	if bad >= 0 {
		b.store.mu.RUnlock()
		return 0, readRangeError(op, label, bad, at(bad), ents[bad].ptr)
	}
	b.pinCall(ents)
	b.store.mu.RUnlock()
	return nonEmpty, nil
}

// readFits reports whether r passes readRangeError's checks for its buffer
// at device address ptr.
func readFits(r Range, ptr uint64) bool {
	return r.Offset >= 0 && r.Len >= 0 && r.Offset <= r.Buf.Len && r.Len <= r.Buf.Len-r.Offset &&
		(r.Len == 0 || uint64(r.Offset) <= math.MaxUint64-ptr)
}

// readRangeError checks range r of item i (its buffer at device address
// ptr): it must fit the buffer and its address must not overflow. It
// returns nil when the range is fine; the error path alone formats.
func readRangeError(op string, label func(i int) string, i int, r Range, ptr uint64) error {
	if _, err := accounting.RangeEnd(r.Offset, r.Len, r.Buf.Len); err != nil {
		return &Error{Op: op, Kind: KindInvalidArgument,
			Detail: fmt.Sprintf("%shandle %d: range of %d bytes at offset %d does not fit its %d bytes",
				label(i), r.Buf.ID, r.Len, r.Offset, r.Buf.Len),
			Fix: "keep offset+length within the buffer's length", Err: err}
	}
	if r.Len == 0 {
		return nil
	}
	if _, err := accounting.AddPtr(ptr, r.Offset); err != nil {
		return &Error{Op: op, Kind: KindInvalidArgument,
			Detail: fmt.Sprintf("%shandle %d: offset %d overflows the device address", label(i), r.Buf.ID, r.Offset),
			Fix:    "pass an offset inside the buffer", Err: err}
	}
	return nil
}

// copyOut copies readback staging out with ordinary loads and stores.
func copyOut(dst, src []byte) { copy(dst, src) }

// gathered is the result of gather: the requested bytes in pinned staging,
// valid until release.
type gathered struct {
	st     hostmem.Staging
	staged bool // st holds blocks; a zero staging is never released
	stage  []byte
	views  []fusion.ReadbackView // nil: request i is the whole of copy i
	offs   []int                 // staging offset of each fused copy
	lens   []int                 // requested length of each request
	direct []byte                // a single staged or direct read, already in its output
	out    []byte                // the output into gave, for a single read staged whole
	tune   transferTuning
	plan   xferplan.Plan // Workers unpacks; zero (as built by Run): one thread
	// ntStores: put writes the caller's slots with non-temporal stores.
	ntStores bool
	// landed is how many bytes at the start of stage the device wrote.
	landed int
	// evictLater: a readback that evicts its staging (tune.evictReads)
	// leaves it to release, which evicts it after the call returned
	// (hostmem.Pool.EvictLater); set by gather, whose callers release right after
	// unpacking. Otherwise the unpack evicts each request's bytes itself
	// (batches, whose staging a graph reuses without release).
	evictLater bool
	// unpacked: the staging was copied out, so release may evict it.
	unpacked bool
	// drain, when set, is where a readback of many requests puts each
	// request's bytes (packedread.go); drained says they are all there.
	drain   *transfer.Drain
	drained bool
	// ints are pooled slices (lens, offs) release gives back.
	ints  []*[]int
	intsA [2]*[]int // backs ints
}

// bytes returns request i's bytes; they alias staging and are valid until
// release.
func (g *gathered) bytes(i int) []byte {
	if g.lens[i] == 0 {
		return nil
	}
	if g.views == nil {
		start := g.offs[i]
		return g.stage[start : start+g.lens[i]]
	}
	v := g.views[i]
	start := g.offs[v.Slot] + v.Offset
	return g.stage[start : start+v.Len]
}

// fill writes requests first..first+n-1 into dst's slots, append-style.
func (g *gathered) fill(dst [][]byte, first, n int) [][]byte {
	out := transfer.GrowSlots(dst, n)
	g.eachFrom(first, n, func(i int) { out[i] = g.put(out[i], g.bytes(first+i)) })
	return out
}

// put returns dst[:0] with src appended, append-style (new storage only
// when dst's capacity is too small). A readback too large for the caches
// (unpackNTBytes) writes dst with non-temporal stores (internal/ntcopy),
// which skip reading each destination line first: W7's readback (52.9 MiB
// into 2048 slots) unpacked in 987 us with them and 1315 us without on the
// reference H100 host. Callers of put fence afterwards.
func (g *gathered) put(dst, src []byte) []byte {
	if cap(dst) < len(src) {
		return append(dst[:0], src...)
	}
	dst = dst[:len(src)]
	g.copyOut(dst, src)
	return dst
}

// copyOut copies src into dst (of its length), with non-temporal stores
// when g.ntStores says so; callers fence afterwards.
func (g *gathered) copyOut(dst, src []byte) {
	if g.ntStores {
		ntcopy.Copy(dst, src)
	} else {
		copy(dst, src)
	}
}

// unpackNTBytes is the readback size from which unpacking writes the
// caller's slots with non-temporal stores: past what the caches of the
// reference host hold, the slots' lines would be evicted before the caller
// reads them anyway.
const unpackNTBytes = 16 << 20

// eachFrom runs f(i) for requests first..first+n-1, with f given the index
// relative to first, as eachRun splits them. f must touch only slot i.
func (g *gathered) eachFrom(first, n int, f func(i int)) {
	g.eachRun(first, n, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			f(i)
		}
	})
}

// eachRun runs f over runs [lo, hi) covering requests first..first+n-1
// (indices relative to first), on several goroutines when there are enough
// bytes to unpack that one thread would dominate the call (1024 x 4 KiB is
// about 0.4 ms on one thread). f reads the requests' staging (bytes) and
// must touch only their slots. When the readback evicts its staging
// (g.tune.EvictReads), release does it after the call (evictLater);
// otherwise each run's staging is evicted here, once read, on the goroutine
// that read it.
func (g *gathered) eachRun(first, n int, f func(lo, hi int)) {
	w := g.plan.Workers
	g.unpacked = true
	evict := g.tune.EvictReads && !g.evictLater
	run := func(lo, hi int) {
		f(lo, hi)
		for i := lo; evict && i < hi; i++ {
			ntcopy.Evict(g.bytes(first + i))
		}
		ntcopy.Fence() // f may have used non-temporal stores
	}
	if w <= 1 || n < 2 {
		run(0, n)
		return
	}
	sp := transfer.GetInts(n)
	defer transfer.PutInts(sp)
	starts := *sp
	acc := 0
	for i := range n {
		starts[i] = acc
		acc += g.lens[first+i]
	}
	copyjob.ForParts(n, w, g.tune.Linger, func(i int) int { return starts[i] }, acc, run)
}

// release gives the staging back. A readback that evicts its staging
// later (evictLater) and was unpacked hands its blocks to an eviction job
// instead, which gives them back once the lines the device wrote are
// evicted; the call returns meanwhile.
func (g *gathered) release() {
	for i, p := range g.ints {
		transfer.PutInts(p)
		g.ints[i] = nil
	}
	g.ints = g.ints[:0]
	if !g.staged {
		return
	}
	if g.evictLater && g.unpacked && g.tune.EvictReads && g.landed > 0 {
		g.st.EvictLater([][]byte{g.stage[:g.landed]}, g.plan.Workers, g.tune.Linger)
		return
	}
	g.st.ReturnAll()
}

// gather validates n ranges, then reads them: fused, staged into one pinned
// block, queued on one leased stream and fenced once. Nothing about the
// caller's outputs is touched here, so a failure leaves them as they were,
// except by a staged or direct single read (see DownloadResidentInto).
// When every range is empty it makes no driver call at all.
//
// label names request i in messages; nil means "item i: " for batches of
// several requests and nothing for one.
//
// The planner (xfer.go) chooses the plan. Many small fused copies take the
// packed path (packed.go), or the per-copy path when the device has no
// memory for its staging. into, when not nil, offers a single request's
// destination: gather asks it for the output after validation; a staged
// (staged.go) or direct plan moves the bytes straight into it, leaving
// the result in g.direct, and a per-copy one leaves it in g.out.
func (b *Backend) gather(op string, n int, at func(i int) Range, label func(i int) string, into func(n int) []byte, d *transfer.Drain) (*gathered, error) {
	g := newGathered(b.tuning(), n)
	g.drain = d
	if n == 0 {
		return g, nil
	}
	if label == nil {
		label = func(i int) string { return itemPrefix(n, i) }
	}
	if n >= transfer.PrewakeMinItems && d == nil {
		g.tune.PrewakeFor(n, at(0).Len)
	}
	sc := scratchPool.Get(n)
	defer scratchPool.Put(sc)
	ents, reqs := sc.Ents[:n], sc.Reads(n)
	nonEmpty, err := b.pinRanges(op, at, label, g.lens, ents, reqs)
	if err != nil {
		return nil, err
	}
	defer b.unpinCall(op, ents)
	phase("pin")
	if nonEmpty == 0 {
		return g, nil
	}
	phase("validate")
	fused, err := transfer.FuseReads(reqs)
	if err != nil {
		return nil, &Error{Op: op, Kind: KindInvalidArgument, Detail: "fusing the readbacks failed",
			Fix: "split the batch; its addresses or lengths overflow", Err: err}
	}
	if fused.Bytes > math.MaxInt {
		return nil, newError(op, KindInvalidArgument, fmt.Sprintf("%d bytes do not fit one staging block", fused.Bytes),
			"split the batch into smaller ones")
	}
	g.views = fused.Views
	g.ntStores = fused.Bytes >= unpackNTBytes && !g.tune.PlainUnpack
	g.tune.EvictReads = g.tune.EvictsReadback(fused.Bytes)
	phase("fuse")
	t := &g.tune
	req := xferplan.Request{Dir: xferplan.Readback, Copies: len(fused.Copies), Bytes: int64(fused.Bytes),
		PackedBytes: transfer.PackedBound(len(fused.Copies), fused.Bytes),
		Streamable:  into != nil && n == 1 && len(fused.Copies) == 1 && !t.AtomicReads,
		Drainable:   d != nil && !t.AtomicReads}
	var out []byte
	var reg *hostmem.Region
	if req.Streamable {
		out = into(int(fused.Bytes))
		reg = b.pinnedHost(out)
		req.Pinned = reg != nil
	}
	g.plan, g.out = t.Choose(req), out
	if d != nil && !(g.plan.Kind == xferplan.Packed && g.plan.Parts > 1) {
		// A readback with a drain wakes its helpers only now that it
		// knows its plan; one in parts wakes them once its first part is
		// queued (landPackedParts). Helpers polling from the call's start
		// slowed its driver calls (the table's DMA and the gather launch
		// took 15-28 and 17-22 us on the reference host for W7).
		t.PrewakeHelpers(g.plan.Workers)
	}
	phase("plan")
	if reg != nil && g.plan.Kind != xferplan.Direct {
		b.unpendRegion(reg)
	}
	if err := b.moveReads(op, g, ents, &fused, out, reg, nonEmpty); err != nil {
		return nil, err
	}
	return g, nil
}

// moveReads moves the fused readback copies as g's plan says: straight
// into out (direct, staged), or into g's staging (packed, else per-copy).
func (b *Backend) moveReads(op string, g *gathered, ents []*residentEntry, fused *fusion.FusedReadbacks,
	out []byte, reg *hostmem.Region, nonEmpty int) error {
	t := &g.tune
	switch g.plan.Kind {
	case xferplan.Direct, xferplan.Staged:
		var err error
		if g.plan.Kind == xferplan.Direct {
			err = b.downloadDirect(op, ents, reg, out, fused.Copies[0].Src)
		} else {
			err = b.downloadPipelined(op, t, &g.plan, ents, out, fused.Copies[0].Src)
		}
		if err == nil {
			g.direct = out
		}
		return err
	case xferplan.Packed:
		err := b.gatherPacked(op, t, &g.plan, ents, g, fused.Copies, fused.Bytes, nonEmpty)
		if err != errNoPackRoom {
			return err
		}
		// No device memory for packed staging: the per-copy path below needs none.
	}
	return b.gatherPerCopy(op, ents, g, fused.Copies, fused.Bytes, nonEmpty)
}

// newGathered returns an empty gathered for n requests under tuning t, its
// lens from the pool (release gives them back). Its callers release it
// right after unpacking, so it evicts its staging after the call
// (evictLater) unless a test asks otherwise.
func newGathered(t transferTuning, n int) *gathered {
	g := &gathered{tune: t, evictLater: !t.InlineEvict}
	lens := transfer.GetInts(n)
	g.ints = append(g.intsA[:0], lens)
	g.lens = *lens
	return g
}

// gatherPerCopy reads copies (bytes in all, nonEmpty requests) into one
// pinned staging block with one driver copy each on one leased stream and
// one fence. On success g holds the staging and the copies' offsets in it;
// on failure it holds nothing and nothing is leaked.
func (b *Backend) gatherPerCopy(op string, ents []*residentEntry, g *gathered, copies []fusion.ReadbackCopy, bytes uint64, nonEmpty int) error {
	g.offs = make([]int, len(copies))
	off := 0
	for i, c := range copies {
		g.offs[i] = off
		off += c.Len
	}

	g.st, g.staged = hostmem.NewStaging(b.hostPool), true
	stage, err := g.st.Slice(op, int(bytes))
	if err != nil {
		g.st.ReturnAll()
		return err
	}
	g.stage, g.landed = stage, int(bytes)
	phase("staging")
	lease, err := b.launch.Lease(op, false)
	if err != nil {
		g.st.ReturnAll()
		return err
	}
	phase("lease")
	for i, c := range copies {
		end := g.offs[i] + c.Len
		if err := b.drv.MemcpyDtoHAsync(stage[g.offs[i]:end:end], c.Src, lease.Stream); err != nil {
			b.syncOrQuarantine(op, inUse{st: []*hostmem.Staging{&g.st}, ents: ents}, lease)
			g.st.ReturnAll()
			return driverError(op, "MemcpyDtoHAsync", err)
		}
	}
	phase("dma")
	if err := b.drv.StreamSynchronize(lease.Stream); err != nil {
		b.syncOrQuarantine(op, inUse{st: []*hostmem.Staging{&g.st}, ents: ents}, lease)
		g.st.ReturnAll()
		return driverError(op, "StreamSynchronize", err)
	}
	phase("fence")
	b.launch.Return(lease, true)
	b.tel.SyncPoints.Add(1)
	b.tel.D2HBytes.Add(bytes)
	b.tel.ReadbackOps.Add(1)
	b.tel.Requested.Add(uint64(nonEmpty))
	b.tel.DeviceCopies.Add(uint64(len(copies)))
	return nil
}
