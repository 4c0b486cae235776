package core

import (
	"fmt"
	"math"

	"github.com/vyre-go/vyrecuda/accounting"
	"github.com/vyre-go/vyrecuda/core/internal/transfer"
	"github.com/vyre-go/vyrecuda/fusion"
)

// UploadAt is one write of Data into Buf starting at byte Offset; the
// written range must lie inside the buffer. Buffer.All and Buffer.Slice
// name the ranges Download reads; an UploadAt names its range by Offset and
// the length of Data.
type UploadAt struct {
	Buf    Buffer
	Offset int
	Data   []byte
}

// Upload writes each item's Data into its Buf starting at byte Offset,
// with at most one fence for the whole call however many items it has.
// Once it returns, every call of this Backend made after it (kernels,
// reads, graphs, peer copies, Free and Close) sees the bytes. Every item is checked before any
// byte moves: its buffer must be live and its range must lie inside it, or
// the call fails with nothing written. Where items overlap, later ones win,
// exactly as if applied in order. Empty Data writes nothing, and a call
// without items touches nothing. Data is only read; the caller may reuse it
// as soon as Upload returns. Small items are packed into one transfer and
// large ones are streamed in chunks; Data lying in memory pinned through
// this Backend (AllocHostPinned, PinHostBuffer) is copied by the device
// directly, and one item of a few KiB from Go memory is handed to the
// driver as it is where the driver stages it faster itself
// (Capabilities.InlineCopies, as on CUDA). Such an item needs no fence:
// Upload returns once the driver has taken the bytes, as the driver's own
// copy does, and the Backend's later work is ordered after it on the
// device; a device failure of that copy is reported by the next call. The buffers of a static upload
// set (AcquireStaticUploads) are immutable: Upload refuses them with
// ErrOwned.
func (b *Backend) Upload(ups ...UploadAt) error {
	return b.uploadCall("Upload", len(ups), func(i int) (Buffer, int, []byte) { return ups[i].Buf, ups[i].Offset, ups[i].Data }, false)
}

// uploadCall is Upload under op, for the n items at names; full asks for
// whole-buffer writes, whose data must be exactly the buffer's length
// (UploadSlice and the deprecated full-buffer uploads).
func (b *Backend) uploadCall(op string, n int, at func(i int) (Buffer, int, []byte), full bool) error {
	if err := b.enter(op); err != nil {
		return err
	}
	defer b.exit()
	return b.upload(op, n, at, full)
}

// itemPrefix names a batch item in messages; single calls need no index.
func itemPrefix(n, i int) string {
	if n > 1 {
		return fmt.Sprintf("item %d: ", i)
	}
	return ""
}

// upload validates n uploads (full: exact lengths; else offset ranges),
// keeps their buffers in flight for the call, and has the transfer engine
// move them (transfer.Engine.Upload: fused, planned, one fence).
// One pass under the store lock looks every handle up and checks every
// range; an unknown handle anywhere is reported before a bad range.
func (b *Backend) upload(op string, n int, at func(i int) (Buffer, int, []byte), full bool) error {
	if n == 0 {
		return nil
	}
	if n >= transfer.PrewakeMinItems {
		_, _, first := at(0)
		b.xfer.PrewakeFor(n, len(first))
	}
	sc := b.xfer.Scratch(n)
	defer b.xfer.PutScratch(sc)
	ents := sc.Ents[:n]
	copies := sc.Ups[:0]
	bad := -1 // the first item whose range does not fit
	b.store.mu.RLock()
	for i := range ents {
		h, off, data := at(i)
		// The usual item (a live handle, a range that fits) takes no call.
		if e := b.store.table.get(h.ID); e != nil && e.n == h.Len && bad < 0 &&
			uploadFits(off, len(data), h.Len, e.ptr, full) && !e.static.Load() {
			ents[i] = e
			if len(data) > 0 {
				copies = append(copies, fusion.UploadCopy{Handle: h.ID, Dst: e.ptr + uint64(off), Data: data})
			}
			continue
		}
		e, herr := b.store.lookupWritable(op, h)
		if herr != nil {
			b.store.mu.RUnlock()
			herr.Detail = itemPrefix(n, i) + herr.Detail
			return herr
		}
		ents[i] = e
		if bad >= 0 {
			continue
		}
		if uploadRangeError(op, n, i, h, off, data, e.ptr, full) != nil {
			bad = i
			continue
		}
		if len(data) > 0 {
			copies = append(copies, fusion.UploadCopy{Handle: h.ID, Dst: e.ptr + uint64(off), Data: data})
		}
	}
	if bad >= 0 {
		b.store.mu.RUnlock()
		h, off, data := at(bad)
		return uploadRangeError(op, n, bad, h, off, data, ents[bad].ptr, full)
	}
	// Counts change only after every item validated, so a bad batch marks
	// nothing; holding mu shared keeps Free out meanwhile.
	b.store.pinCall(ents)
	b.store.mu.RUnlock()
	defer b.store.unpinCall(op, ents)
	sc.Ups = copies
	transfer.Phase("pin")
	transfer.Phase("validate")
	return b.xfer.Upload(op, ents, copies)
}

// uploadFits reports whether n bytes at off pass uploadRangeError's checks
// for a buffer of length bufLen at device address ptr (off is 0 when full).
func uploadFits(off, n, bufLen int, ptr uint64, full bool) bool {
	if full {
		return n == bufLen
	}
	return off >= 0 && n >= 0 && off <= bufLen && n <= bufLen-off && (n == 0 || uint64(off) <= math.MaxUint64-ptr)
}

// uploadRangeError checks item i (handle h at device address ptr): full
// uploads need exactly h.Len bytes, others must fit at off, and the
// destination address must not overflow. It returns nil when the item is
// fine; the error path alone formats.
func uploadRangeError(op string, n, i int, h Buffer, off int, data []byte, ptr uint64, full bool) error {
	if full {
		if len(data) != h.Len {
			return newError(op, KindInvalidArgument,
				fmt.Sprintf("%shandle %d needs exactly %d bytes but got %d", itemPrefix(n, i), h.ID, h.Len, len(data)),
				"pass data of exactly the buffer's length, or use UploadSliceAt (or Upload with an Offset) to write part of it")
		}
	} else if _, err := accounting.RangeEnd(off, len(data), h.Len); err != nil {
		return &Error{Op: op, Kind: KindInvalidArgument,
			Detail: fmt.Sprintf("%shandle %d: %d bytes at offset %d do not fit its %d bytes: %s", itemPrefix(n, i), h.ID, len(data), off, h.Len, rangeWhy(off, len(data), h.Len)),
			Fix:    "keep offset+len(data) within the buffer's length"}
	}
	if len(data) == 0 {
		return nil
	}
	if _, err := accounting.AddPtr(ptr, off); err != nil {
		return &Error{Op: op, Kind: KindInvalidArgument,
			Detail: fmt.Sprintf("%shandle %d: offset %d overflows the device address", itemPrefix(n, i), h.ID, off),
			Fix:    "pass an offset inside the buffer", Err: err}
	}
	return nil
}
