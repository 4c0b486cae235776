package core

import (
	"fmt"
	"math"

	"github.com/vyre-go/vyrecuda/accounting"
	"github.com/vyre-go/vyrecuda/core/internal/transfer"
	"github.com/vyre-go/vyrecuda/fusion"
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
		g, err := b.gather(op, len(rs), at, nil, nil, transfer.FreshDrain(out))
		if err != nil {
			return nil, err
		}
		defer g.Release()
		g.DrainAll()
		return out, nil
	}
	res := transfer.GetSlots(len(rs))
	defer transfer.PutSlots(res)
	g, err := b.gather(op, len(rs), at, nil, nil, transfer.SlotDrain(dst, *res))
	if err != nil {
		return dst, err
	}
	defer g.Release()
	g.DrainAll()
	out := transfer.GrowSlots(dst, len(rs))
	copy(out, *res)
	transfer.Phase("unpack")
	return out, nil
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
			Detail: fmt.Sprintf("%shandle %d: range of %d bytes at offset %d does not fit its %d bytes: %s",
				label(i), r.Buf.ID, r.Len, r.Offset, r.Buf.Len, rangeWhy(r.Offset, r.Len, r.Buf.Len)),
			Fix: "keep offset+length within the buffer's length"}
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
// or direct single read (see Download). When every range is
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
	defer b.store.unpinCall(op, ents)
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
