package core

import (
	"fmt"
	"sort"

	"github.com/vyre-go/vyrecuda/accounting"
	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
	"github.com/vyre-go/vyrecuda/core/internal/transfer"
	"github.com/vyre-go/vyrecuda/fusion"
)

// resolveCopies checks the uploads' and reads' ranges against the pinned
// entries, moves those whose host side lies in memory pinned through the
// Backend to the direct list (transfer.DirectUp, DirectRead), and fuses
// the rest (transfer.Batch.Fuse). runDst, given by Run, offers each read's
// slot as its destination when its capacity lies in such memory. On
// failure the plan's pinned regions are still listed in pl.xfer.Regions,
// for the caller's release.
func (b *Backend) resolveCopies(op string, pl *batchPlan, runDst [][]byte) error {
	batch, lay, ents, tb := pl.batch, &pl.lay, pl.ents, &pl.xfer
	tb.Ups = make([]fusion.UploadCopy, 0, len(batch.Uploads))
	for i, u := range batch.Uploads {
		dst, err := copyAddr(op, lay, lay.uploads+i, u.Buf, ents[lay.uploads+i].ptr, u.Offset, len(u.Data), true)
		if err != nil {
			return err
		}
		if len(u.Data) > 0 {
			tb.Ups = append(tb.Ups, fusion.UploadCopy{Handle: u.Buf.ID, Dst: dst, Data: u.Data})
		}
	}
	b.splitDirectUploads(tb)
	if err := pl.checkInto(op); err != nil {
		return err
	}
	regs := b.pinnedReads(pl, runDst)
	reqs := make([]fusion.ReadbackCopy, len(batch.Reads))
	for i, r := range batch.Reads {
		src, err := copyAddr(op, lay, lay.reads+i, r.Buf, ents[lay.reads+i].ptr, r.Offset, r.Len, false)
		if err != nil {
			b.xfer.Unpin(regs[i:]...)
			return err
		}
		reqs[i] = fusion.ReadbackCopy{Handle: r.Buf.ID}
		if r.Len == 0 {
			continue
		}
		if reg := regs[i]; reg != nil {
			out := pl.readDest(i, runDst)
			tb.DirectRds = append(tb.DirectRds, transfer.DirectRead{Src: src, Out: out, Mapped: reg.Allocated()})
			tb.Regions = append(tb.Regions, reg)
			if pl.into == nil {
				pl.into = make([][]byte, len(batch.Reads))
			}
			pl.into[i] = out
			continue
		}
		reqs[i].Src, reqs[i].Len = src, r.Len
		tb.NonEmptyReads++
	}
	return tb.Fuse(op, reqs)
}

// copyAddr checks that n bytes at off fit h, the buffer at position pos of
// the batch's layout, and returns their device address (base is h's); up
// says whether they are an upload's. The label is only formatted for an
// error: a batch of 1024 reads spent 150 us formatting labels it never
// showed.
func copyAddr(op string, lay *batchLayout, pos int, h Buffer, base uint64, off, n int, up bool) (uint64, error) {
	if _, err := accounting.RangeEnd(off, n, h.Len); err != nil {
		label := lay.label(pos)
		if up {
			return 0, &Error{Op: op, Kind: KindInvalidArgument,
				Detail: fmt.Sprintf("%shandle %d: %d bytes at offset %d do not fit its %d bytes: %s", label, h.ID, n, off, h.Len, rangeWhy(off, n, h.Len)),
				Fix:    "keep offset+len(data) within the buffer's length"}
		}
		return 0, &Error{Op: op, Kind: KindInvalidArgument,
			Detail: fmt.Sprintf("%shandle %d: range of %d bytes at offset %d does not fit its %d bytes: %s", label, h.ID, n, off, h.Len, rangeWhy(off, n, h.Len)),
			Fix:    "keep offset+length within the buffer's length"}
	}
	if n == 0 {
		return 0, nil
	}
	addr, err := accounting.AddPtr(base, off)
	if err != nil {
		return 0, &Error{Op: op, Kind: KindInvalidArgument,
			Detail: fmt.Sprintf("%shandle %d: offset %d overflows the device address", lay.label(pos), h.ID, off),
			Fix:    "pass an offset inside the buffer", Err: err}
	}
	return addr, nil
}

// checkInto validates Batch.Into: empty, or one slot per read, each nil
// or exactly as long as its read. It sets pl.into.
func (pl *batchPlan) checkInto(op string) error {
	batch := pl.batch
	if len(batch.Into) == 0 {
		return nil
	}
	if len(batch.Into) != len(batch.Reads) {
		return newError(op, KindInvalidArgument,
			fmt.Sprintf("Into has %d destinations for %d reads", len(batch.Into), len(batch.Reads)),
			"give one destination per read (nil where the read may land anywhere), or leave Into empty")
	}
	for i, d := range batch.Into {
		if d != nil && len(d) != batch.Reads[i].Len {
			return newError(op, KindInvalidArgument,
				fmt.Sprintf("%sInto holds %d bytes for a read of %d", pl.lay.label(pl.lay.reads+i), len(d), batch.Reads[i].Len),
				"make each destination exactly as long as its read")
		}
	}
	pl.into = make([][]byte, len(batch.Into))
	copy(pl.into, batch.Into)
	return nil
}

// Many small copies are cheaper packed than as a DMA each (1024 reads of
// 4 KiB into pinned memory took 1.8 ms as 1024 DMAs in a graph on the H100
// host, against 0.25 ms gathered into staging and copied out): when a batch
// has directManyCopies or more copies in one direction that could move
// directly, only those of directMinBytes or more do.
const (
	directManyCopies = 32
	directMinBytes   = 64 << 10
)

// pinnedReads returns, per read, the pinned region its destination lies
// in when it moves directly (one pending use each; nil otherwise). Under
// WithAtomicReadbacks none does: every read lands in staging first, as a
// single Download into pinned memory does.
func (b *Backend) pinnedReads(pl *batchPlan, runDst [][]byte) []*hostmem.Region {
	regs := make([]*hostmem.Region, len(pl.batch.Reads))
	if b.cfg.xfer.AtomicReads {
		return regs
	}
	n := 0
	for i, r := range pl.batch.Reads {
		if r.Len <= 0 {
			continue // nothing to move, or a range resolveCopies refuses
		}
		if out := pl.readDest(i, runDst); out != nil {
			if regs[i] = b.xfer.Pinned(out); regs[i] != nil {
				n++
			}
		}
	}
	for i, r := range pl.batch.Reads {
		if n >= directManyCopies && regs[i] != nil && r.Len < directMinBytes {
			b.xfer.Unpin(regs[i])
			regs[i] = nil
		}
	}
	return regs
}

// readDest returns read i's destination known at submission: Into's, or
// else the slot Run was given when its capacity holds the read (nil: none).
func (pl *batchPlan) readDest(i int, runDst [][]byte) []byte {
	n := pl.batch.Reads[i].Len
	if pl.into != nil && pl.into[i] != nil {
		return pl.into[i]
	}
	if i < len(runDst) && cap(runDst[i]) >= n {
		return runDst[i][:n]
	}
	return nil
}

// splitDirectUploads moves the uploads of tb.Ups whose bytes lie in memory
// pinned through the Backend, and whose device range meets no other
// upload's, to tb.DirectUps: queued after the others, they land exactly as
// the batch's order says. Overlapping uploads stay with the fused ones,
// which apply them in order.
func (b *Backend) splitDirectUploads(tb *transfer.Batch) {
	var regs []*hostmem.Region
	for i, c := range tb.Ups {
		if reg := b.xfer.Pinned(c.Data); reg != nil {
			if regs == nil {
				regs = make([]*hostmem.Region, len(tb.Ups))
			}
			regs[i] = reg
		}
	}
	if regs == nil {
		return
	}
	if n := countRegions(regs); n >= directManyCopies {
		for i, c := range tb.Ups {
			if regs[i] != nil && len(c.Data) < directMinBytes {
				b.xfer.Unpin(regs[i])
				regs[i] = nil
			}
		}
	}
	alone := aloneRanges(tb.Ups)
	keep := tb.Ups[:0]
	for i, c := range tb.Ups {
		switch {
		case regs[i] != nil && alone[i]:
			tb.DirectUps = append(tb.DirectUps, transfer.DirectUp{Dst: c.Dst, Data: c.Data})
			tb.Regions = append(tb.Regions, regs[i])
		case regs[i] != nil:
			b.xfer.Unpin(regs[i])
			keep = append(keep, c)
		default:
			keep = append(keep, c)
		}
	}
	tb.Ups = keep
}

// aloneRanges reports, for each copy, whether its device range lies apart
// from every other copy's. Sorted by start, the copies fall into runs
// whose ranges chain into each other; a copy is alone when its run has no
// other copy. That is exact: in a run of two or more, every copy shares a
// byte with some other (perhaps not its neighbour in address order).
func aloneRanges(ups []fusion.UploadCopy) []bool {
	idx := make([]int, len(ups))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return ups[idx[a]].Dst < ups[idx[b]].Dst })
	alone := make([]bool, len(ups))
	for lo := 0; lo < len(idx); {
		end := ups[idx[lo]].Dst + uint64(len(ups[idx[lo]].Data))
		hi := lo + 1
		for ; hi < len(idx) && ups[idx[hi]].Dst < end; hi++ {
			end = max(end, ups[idx[hi]].Dst+uint64(len(ups[idx[hi]].Data)))
		}
		if hi == lo+1 {
			alone[idx[lo]] = true
		}
		lo = hi
	}
	return alone
}

// countRegions counts the regions of regs that are not nil.
func countRegions(regs []*hostmem.Region) int {
	n := 0
	for _, r := range regs {
		if r != nil {
			n++
		}
	}
	return n
}
