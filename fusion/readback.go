package fusion

import (
	"fmt"
	"math"

	"github.com/vyre-go/vyrecuda/accounting"
)

// ReadbackCopy is one device-to-host copy request: read Len bytes from device
// address Src inside the buffer identified by Handle.
type ReadbackCopy struct {
	Handle uint64
	Src    uint64
	Len    int
}

// ReadbackView locates one request's bytes in the fused result: Len bytes
// starting Offset bytes into the copy Copies[Slot]. A zero-length request's
// view is {Slot: -1, Offset: 0, Len: 0}: it reads nothing and names no copy.
type ReadbackView struct {
	Slot, Offset, Len int
}

// FusedReadbacks is the result of FuseReadbacks: the copies to perform,
// ordered by handle and then source address; one view per request, in
// request order; and the bytes the copies move.
type FusedReadbacks struct {
	Copies []ReadbackCopy
	Views  []ReadbackView
	Bytes  uint64
}

// FuseReadbacks merges the requests' source ranges into the fewest copies
// that cover them: same-handle ranges that overlap or touch become one copy,
// different handles never merge. Bytes is the union of the requested bytes,
// counted per handle. Every non-empty request's view reads exactly its bytes
// from a copy of its own handle; zero-length requests get an empty view and
// cause no copy.
//
// Requests already ordered by (handle, src) are fused without a sort or
// scratch (non-empty ones in strictly increasing handle order, one copy per
// buffer, without the sweep either); the scratch other batches sort in is
// recycled, so steady use allocates only Views and Copies. A negative length is an error wrapping accounting.ErrNegative; a range that
// does not fit in 64 bits, or a fused copy longer than the largest int, one
// wrapping accounting.ErrOverflow. reqs is never modified, and nothing is
// allocated for input that fails.
func FuseReadbacks(reqs []ReadbackCopy) (FusedReadbacks, error) {
	const op = "FuseReadbacks"
	if out, ok := distinctReadbacks(reqs); ok {
		return out, nil
	}
	sorted, nonEmpty, err := checkReadbacks(op, reqs)
	if err != nil {
		return FusedReadbacks{}, err
	}

	// Visit the non-empty requests in (handle, src, index) order: directly
	// when the input is sorted, otherwise through a sorted list of keys.
	// Position p runs over reqs (sorted, order nil) or over order (unsorted).
	var order []key
	if !sorted {
		sp := getScratch(2 * nonEmpty)
		defer putScratch(sp)
		scratch := *sp
		order = scratch[:0:nonEmpty]
		for i, r := range reqs {
			if r.Len > 0 {
				order = append(order, key{r.Handle, r.Src, i})
			}
		}
		sortKeys(order, scratch[nonEmpty:2*nonEmpty])
	}

	groups, bytes, err := countReadbackCopies(op, reqs, order)
	if err != nil {
		return FusedReadbacks{}, err
	}
	out := FusedReadbacks{Bytes: bytes}
	if len(reqs) > 0 {
		out.Views = make([]ReadbackView, len(reqs))
	}
	if groups > 0 {
		out.Copies = make([]ReadbackCopy, 0, groups)
	}
	writeReadbacks(&out, reqs, order)
	return out, nil
}

// checkReadbacks validates reqs (no negative length, no range past 64
// bits) and reports whether the non-empty ones are ordered by (handle, src)
// and how many there are.
func checkReadbacks(op string, reqs []ReadbackCopy) (sorted bool, nonEmpty int, err error) {
	sorted = true
	var prev key
	for i, r := range reqs {
		if r.Len < 0 {
			return false, 0, negativeError(op, i, r.Handle, r.Src, r.Len)
		}
		if r.Len == 0 {
			continue
		}
		if uint64(r.Len) > math.MaxUint64-r.Src {
			return false, 0, overflowError(op, "src", i, r.Handle, r.Src, r.Len)
		}
		k := key{r.Handle, r.Src, i}
		if nonEmpty > 0 && before(k, prev) {
			sorted = false
		}
		prev = k
		nonEmpty++
	}
	return sorted, nonEmpty, nil
}

// readbackAt returns the request visited at position p of the walk over
// reqs (order nil) or order, and whether it is to be skipped (an empty
// request, which only the walk over reqs meets).
func readbackAt(reqs []ReadbackCopy, order []key, p int) (int, bool) {
	if order != nil {
		return order[p].index, false
	}
	return p, reqs[p].Len == 0
}

// walkLimit is the number of positions of the walk over reqs or order.
func walkLimit(n int, order []key) int {
	if order != nil {
		return len(order)
	}
	return n
}

// countReadbackCopies is the first pass of FuseReadbacks: it counts the
// fused copies and their bytes, and checks each copy's length and the
// total, so the outputs are allocated once and only for input that
// succeeds.
func countReadbackCopies(op string, reqs []ReadbackCopy, order []key) (groups int, bytes uint64, err error) {
	var handle, start, end uint64
	open := false
	closeGroup := func() error {
		if end-start > math.MaxInt {
			return totalOverflowError(op, handle, start, end)
		}
		if end-start > math.MaxUint64-bytes {
			return &accounting.Error{
				Op:  op,
				Err: accounting.ErrOverflow,
				Detail: fmt.Sprintf("fused copies total %d + %d bytes, more than fits in 64 bits",
					bytes, end-start),
				Fix: "split the batch into smaller batches",
			}
		}
		bytes += end - start
		groups++
		return nil
	}
	for p, limit := 0, walkLimit(len(reqs), order); p < limit; p++ {
		i, skip := readbackAt(reqs, order, p)
		if skip {
			continue
		}
		r := reqs[i]
		rEnd := r.Src + uint64(r.Len)
		if open && r.Handle == handle && r.Src <= end {
			end = max(end, rEnd)
			continue
		}
		if open {
			if err := closeGroup(); err != nil {
				return 0, 0, err
			}
		}
		handle, start, end, open = r.Handle, r.Src, rEnd, true
	}
	if open {
		if err := closeGroup(); err != nil {
			return 0, 0, err
		}
	}
	return groups, bytes, nil
}

// writeReadbacks is the second pass of FuseReadbacks: the same walk as
// countReadbackCopies, now appending the copies to out.Copies and writing
// every request's view. A copy's length is only known when its group
// closes, so it is patched then.
func writeReadbacks(out *FusedReadbacks, reqs []ReadbackCopy, order []key) {
	for i, r := range reqs {
		if r.Len == 0 {
			out.Views[i] = ReadbackView{Slot: -1}
		}
	}
	var handle, start, end uint64
	slot := -1
	for p, limit := 0, walkLimit(len(reqs), order); p < limit; p++ {
		i, skip := readbackAt(reqs, order, p)
		if skip {
			continue
		}
		r := reqs[i]
		rEnd := r.Src + uint64(r.Len)
		if slot < 0 || r.Handle != handle || r.Src > end {
			if slot >= 0 {
				out.Copies[slot].Len = int(end - start)
			}
			out.Copies = append(out.Copies, ReadbackCopy{Handle: r.Handle, Src: r.Src})
			slot++
			handle, start, end = r.Handle, r.Src, rEnd
		} else {
			end = max(end, rEnd)
		}
		out.Views[i] = ReadbackView{Slot: slot, Offset: int(r.Src - start), Len: r.Len}
	}
	if slot >= 0 {
		out.Copies[slot].Len = int(end - start)
	}
}

// distinctReadbackBytes reports whether reqs has the shape
// distinctReadbacks fuses directly, and its bytes.
func distinctReadbackBytes(reqs []ReadbackCopy) (bytes uint64, ok bool) {
	if len(reqs) == 0 {
		return 0, false
	}
	prev := reqs[0].Handle
	for i := range reqs {
		r := &reqs[i]
		n := uint64(r.Len)
		if r.Len <= 0 || n > math.MaxUint64-r.Src || n > math.MaxUint64-bytes || i > 0 && r.Handle <= prev {
			return 0, false
		}
		prev = r.Handle
		bytes += n
	}
	return bytes, true
}

// distinctReadbacks fuses the common batch shape directly: non-empty
// requests in strictly increasing handle order (so no two share a handle),
// no range and not the total overflowing. Each request is then its own copy
// and its view the whole copy. ok is false, with nothing allocated, for
// anything else, errors included, which the general sweep handles.
func distinctReadbacks(reqs []ReadbackCopy) (out FusedReadbacks, ok bool) {
	bytes, ok := distinctReadbackBytes(reqs)
	if !ok {
		return FusedReadbacks{}, false
	}
	out = FusedReadbacks{Copies: append([]ReadbackCopy(nil), reqs...), Views: make([]ReadbackView, len(reqs)), Bytes: bytes}
	for i := range reqs {
		out.Views[i] = ReadbackView{Slot: i, Len: reqs[i].Len}
	}
	return out, true
}
