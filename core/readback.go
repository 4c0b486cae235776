package core

import (
	"fmt"
	"math"

	"github.com/vyre-go/vyrecuda/accounting"
	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
	"github.com/vyre-go/vyrecuda/fusion"
	"github.com/vyre-go/vyrecuda/internal/ntcopy"
	"github.com/vyre-go/vyrecuda/xferplan"
)

// Range names Len bytes of Buf starting at byte Offset: what Download and
// DownloadMany read and a Batch's Reads name. Build one with Buffer.All or
// Buffer.Slice; a range is checked against its buffer when a call uses it.
type Range struct {
	Buf         Buffer
	Offset, Len int
}

// All returns the range of every byte of h.
func (h Buffer) All() Range { return Range{Buf: h, Len: h.Len} }

// Slice returns the range of n bytes of h starting at byte off. It does
// not check them: the call that uses the range refuses one that does not
// lie inside h.
func (h Buffer) Slice(off, n int) Range { return Range{Buf: h, Offset: off, Len: n} }

// Download reads the bytes r names and returns them, with one fence. They
// go into dst's storage when its capacity suffices, else into a new slice,
// append-style: use the returned slice (of length r.Len), as with append.
// A nil dst always gives a new slice, never nil, even for an empty range. An
// empty range reads nothing and never touches the device. On failure Download
// returns dst unchanged, and the bytes of dst's storage are unchanged too,
// with two exceptions:
//   - a device failure in the middle of a large read (streamed in chunks
//     from 256 KiB, each written into dst's storage as it arrives) may leave
//     a prefix of that storage holding r's bytes;
//   - when dst's storage lies inside memory pinned through this Backend
//     (AllocHostPinned, PinHostBuffer), the device copies into it directly,
//     and after a failure any of its first r.Len bytes may hold r's bytes.
//     If the failure also left the copy's stream unsynchronized (the Backend
//     quarantines it; see Close), the copy may still write them after
//     Download returned, at any moment until a later call on the Backend
//     synchronizes that stream. Until then the memory stays in use:
//     PinnedBuffer.Free and UnpinHostBuffer refuse it with ErrInFlight, and
//     if the stream never synchronizes Close leaves it pinned. After a
//     failed direct read, use that memory for nothing else until Free or
//     UnpinHostBuffer succeeds.
func (b *Backend) Download(r Range, dst []byte) ([]byte, error) {
	return b.download("Download", r, dst)
}

// download is Download under op.
func (b *Backend) download(op string, r Range, dst []byte) ([]byte, error) {
	if err := b.enter(op); err != nil {
		return dst, err
	}
	defer b.exit()
	return b.readOne(op, r, dst, dst != nil)
}

// DownloadMany reads every range of rs with one fence for all of them and
// returns their bytes, one slice per range in order. Overlapping and
// touching ranges of one buffer are read once; empty ranges read nothing,
// and a call whose ranges are all empty never touches the device.
//
// With dst nil every slice is new, with a capacity equal to its length, so
// writing or appending to one never changes another; the slices of small
// ranges may share one allocation of up to 1 MiB, which stays alive while
// any of them does. Otherwise the results go into dst's slots,
// append-style: slot i reuses the capacity of dst's i-th slice (any slot
// within dst's capacity) and dst's own capacity is reused for the slots.
// A loop of readbacks is faster reusing the slots it got last time: new
// memory is cold, and the process may have to fault its pages in (1024
// ranges of 4 KiB on an H100 host: 1.15-1.79 ms a call into new slices,
// against 0.19-0.30 ms into reused ones).
//
// On failure DownloadMany returns dst unchanged, with every slot's header
// as it was. The bytes of the slots are unchanged too unless the device
// fails in the middle of a large readback: those move in parts, each
// range's bytes reaching its slot as soon as their part has landed, so such
// a failure may leave some slots' storage holding all of their range's
// bytes (the others keep theirs). WithAtomicReadbacks rules that out, at
// the cost of the overlap.
func (b *Backend) DownloadMany(rs []Range, dst [][]byte) ([][]byte, error) {
	return b.downloadMany("DownloadMany", rs, dst)
}

// downloadMany is DownloadMany under op.
func (b *Backend) downloadMany(op string, rs []Range, dst [][]byte) ([][]byte, error) {
	if err := b.enter(op); err != nil {
		return dst, err
	}
	defer b.exit()
	at := func(i int) Range { return rs[i] }
	if dst == nil {
		out := make([][]byte, len(rs))
		g, err := b.gather(op, len(rs), at, nil, nil, freshDrain(out))
		if err != nil {
			return nil, err
		}
		defer g.release()
		g.drainAll()
		return out, nil
	}
	res := getSlots(len(rs))
	defer putSlots(res)
	g, err := b.gather(op, len(rs), at, nil, nil, &drain{dest: slotDest(dst), res: *res})
	if err != nil {
		return dst, err
	}
	defer g.release()
	g.drainAll()
	out := growSlots(dst, len(rs))
	copy(out, *res)
	phase("unpack")
	return out, nil
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
	parallelCopy(out, src, g.plan.Workers, g.tune.linger, copyOut)
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
	b.store.pinCall(ents)
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

// growSlots returns s resliced to n elements, reusing its capacity when it
// suffices and otherwise a new slice that starts with s's elements (including
// those past len within cap, so their storage is reused too).
func growSlots[T any](s []T, n int) []T {
	if n <= cap(s) {
		return s[:n]
	}
	out := make([]T, n)
	copy(out, s[:cap(s)])
	return out
}

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
	drain   *drain
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
	out := growSlots(dst, n)
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
// (g.tune.evictReads), release does it after the call (evictLater);
// otherwise each run's staging is evicted here, once read, on the goroutine
// that read it.
func (g *gathered) eachRun(first, n int, f func(lo, hi int)) {
	w := g.plan.Workers
	g.unpacked = true
	evict := g.tune.evictReads && !g.evictLater
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
	sp := getInts(n)
	defer putInts(sp)
	starts := *sp
	acc := 0
	for i := range n {
		starts[i] = acc
		acc += g.lens[first+i]
	}
	forParts(n, w, g.tune.linger, func(i int) int { return starts[i] }, acc, run)
}

// release gives the staging back. A readback that evicts its staging
// later (evictLater) and was unpacked hands its blocks to an eviction job
// instead, which gives them back once the lines the device wrote are
// evicted; the call returns meanwhile.
func (g *gathered) release() {
	for i, p := range g.ints {
		putInts(p)
		g.ints[i] = nil
	}
	g.ints = g.ints[:0]
	if !g.staged {
		return
	}
	if g.evictLater && g.unpacked && g.tune.evictReads && g.landed > 0 {
		g.st.EvictLater([][]byte{g.stage[:g.landed]}, g.plan.Workers, g.tune.linger)
		return
	}
	g.st.ReturnAll()
}

// gather validates n ranges, then reads them: fused, staged into one pinned
// block, queued on one leased stream and fenced once. Nothing about the
// caller's outputs is touched here, so a failure leaves them as they were,
// except by a staged or direct single read (see Download).
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
func (b *Backend) gather(op string, n int, at func(i int) Range, label func(i int) string, into func(n int) []byte, d *drain) (*gathered, error) {
	g := newGathered(b.tuning(), n)
	g.drain = d
	if n == 0 {
		return g, nil
	}
	if label == nil {
		label = func(i int) string { return itemPrefix(n, i) }
	}
	if n >= prewakeMinItems && d == nil {
		g.tune.prewakeFor(n, at(0).Len)
	}
	sc := getScratch(n)
	defer putScratch(sc)
	ents, reqs := sc.ents[:n], sc.reads(n)
	nonEmpty, err := b.pinRanges(op, at, label, g.lens, ents, reqs)
	if err != nil {
		return nil, err
	}
	defer b.store.unpinCall(op, ents)
	phase("pin")
	if nonEmpty == 0 {
		return g, nil
	}
	phase("validate")
	fused, err := fuseReads(reqs)
	if err != nil {
		return nil, &Error{Op: op, Kind: KindInvalidArgument, Detail: "fusing the readbacks failed",
			Fix: "split the batch; its addresses or lengths overflow", Err: err}
	}
	if fused.Bytes > math.MaxInt {
		return nil, newError(op, KindInvalidArgument, fmt.Sprintf("%d bytes do not fit one staging block", fused.Bytes),
			"split the batch into smaller ones")
	}
	g.views = fused.Views
	g.ntStores = fused.Bytes >= unpackNTBytes && !g.tune.plainUnpack
	g.tune.evictReads = g.tune.evictsReadback(fused.Bytes)
	phase("fuse")
	t := &g.tune
	req := xferplan.Request{Dir: xferplan.Readback, Copies: len(fused.Copies), Bytes: int64(fused.Bytes),
		PackedBytes: packedBound(len(fused.Copies), fused.Bytes),
		Streamable:  into != nil && n == 1 && len(fused.Copies) == 1 && !t.atomicReads,
		Drainable:   d != nil && !t.atomicReads}
	var out []byte
	var reg *hostmem.Region
	if req.Streamable {
		out = into(int(fused.Bytes))
		reg = b.pinnedHost(out)
		req.Pinned = reg != nil
	}
	g.plan, g.out = t.choose(req), out
	if d != nil && !(g.plan.Kind == xferplan.Packed && g.plan.Parts > 1) {
		// A readback with a drain wakes its helpers only now that it
		// knows its plan; one in parts wakes them once its first part is
		// queued (landPackedParts). Helpers polling from the call's start
		// slowed its driver calls (the table's DMA and the gather launch
		// took 15-28 and 17-22 us on the reference host for W7).
		t.prewakeHelpers(g.plan.Workers)
	}
	phase("plan")
	if reg != nil && g.plan.Kind != xferplan.Direct {
		b.pinned.Done(reg)
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
	g := &gathered{tune: t, evictLater: !t.inlineEvict}
	lens := getInts(n)
	g.ints = append(g.intsA[:0], lens)
	g.lens = *lens
	return g
}

// fuseReads fuses the requests of a readback. The usual batch (one whole
// buffer per request, handles increasing) is already its own fusion: its
// copies are reqs (scratch the caller owns until the copies are queued and
// fenced) and its Views nil, meaning request i is the whole of copy i, so
// it allocates nothing; anything else goes through fusion.FuseReadbacks.
func fuseReads(reqs []fusion.ReadbackCopy) (fusion.FusedReadbacks, error) {
	if bytes, ok := fusion.DistinctReadbacks(reqs); ok {
		return fusion.FusedReadbacks{Copies: reqs, Bytes: bytes}, nil
	}
	return fusion.FuseReadbacks(reqs)
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
