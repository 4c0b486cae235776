package core

import (
	"fmt"
	"math"
	"sort"

	"github.com/vyre-go/vyrecuda/accounting"
	"github.com/vyre-go/vyrecuda/core/internal/transfer"
	"github.com/vyre-go/vyrecuda/fusion"
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
	defer g.Release()
	g.DrainAll()
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
	defer g.Release()
	g.DrainAll()
	out := transfer.GrowSlots(dst, len(hs))
	copy(out, *res)
	transfer.Phase("unpack")
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
	defer g.Release()
	g.DrainAll()
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
	defer g.Release()
	g.DrainAll()
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
// them out on the plan's goroutines (transfer.Read.Single). On failure it
// returns dst.
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
	defer g.Release()
	return g.Single(output), nil
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

// gather validates n ranges, then has the transfer engine read them
// (transfer.Engine.Gather): fused, staged into pinned memory, queued on
// leased streams and fenced once. Nothing about the caller's outputs is
// touched here, so a failure leaves them as they were, except by a staged
// or direct single read (see DownloadResidentInto). When every range is
// empty it makes no driver call at all.
//
// label names request i in messages; nil means "item i: " for batches of
// several requests and nothing for one. into, when not nil, offers a
// single request's destination (Engine.Gather says how it is used); d,
// when not nil, is where each request's bytes go (DrainAll).
func (b *Backend) gather(op string, n int, at func(i int) Range, label func(i int) string, into func(n int) []byte, d *transfer.Drain) (*transfer.Read, error) {
	g := b.xfer.NewRead(n, d)
	if n == 0 {
		return g, nil
	}
	if label == nil {
		label = func(i int) string { return itemPrefix(n, i) }
	}
	if n >= transfer.PrewakeMinItems && d == nil {
		g.PrewakeFor(at(0).Len)
	}
	sc := b.xfer.Scratch(n)
	defer b.xfer.PutScratch(sc)
	ents, reqs := sc.Ents[:n], sc.Reads(n)
	nonEmpty, err := b.pinRanges(op, at, label, g.Lens(), ents, reqs)
	if err != nil {
		return nil, err
	}
	defer b.unpinCall(op, ents)
	transfer.Phase("pin")
	if nonEmpty == 0 {
		return g, nil
	}
	transfer.Phase("validate")
	if err := b.xfer.Gather(op, g, ents, reqs, nonEmpty, into); err != nil {
		return nil, err
	}
	return g, nil
}
