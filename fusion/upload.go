package fusion

import (
	"math"
	"slices"
)

// UploadCopy is one host-to-device copy request: write Data at device
// address Dst inside the buffer identified by Handle.
type UploadCopy struct {
	Handle uint64
	Dst    uint64
	Data   []byte
}

// FuseUploads returns the fewest copies that leave device memory exactly as
// applying copies in order would, and the bytes they move.
//
// Copies of the same handle whose ranges overlap or touch merge into one;
// where they overlap, the later request's bytes win. Copies of different
// handles never merge. The result is ordered by handle and then address,
// and no two consecutive copies of one handle overlap or touch. Empty
// copies are dropped.
//
// A fused copy that comes from a single request, or from a group whose last
// request covers the whole group (every earlier byte is overwritten by it),
// aliases that request's Data without copying it; other groups get a freshly
// allocated buffer (one allocation shared by all of them). bytes never
// exceeds the requested bytes.
//
// Requests already ordered by (handle, dst) with no empties are fused
// without a sort or scratch allocation. An address range that does not fit
// in 64 bits is an error wrapping accounting.ErrOverflow; copies is never
// modified, and nothing is allocated for input that fails.
func FuseUploads(copies []UploadCopy) (fused []UploadCopy, bytes uint64, err error) {
	const op = "FuseUploads"
	sorted := true
	nonEmpty := 0
	var prev key
	for i, c := range copies {
		n := len(c.Data)
		if n == 0 {
			continue
		}
		if uint64(n) > math.MaxUint64-c.Dst {
			return nil, 0, overflowError(op, "dst", i, c.Handle, c.Dst, n)
		}
		k := key{c.Handle, c.Dst, i}
		if nonEmpty > 0 && compareKeys(prev, k) > 0 {
			sorted = false
		}
		prev = k
		nonEmpty++
	}
	if nonEmpty == 0 {
		return nil, 0, nil
	}

	// Visit the non-empty requests in (handle, dst, index) order: directly
	// when the input is sorted without empties, otherwise through a sorted
	// list of keys. Position p runs over copies or over order.
	var order []key
	if !sorted || nonEmpty != len(copies) {
		order = make([]key, 0, nonEmpty)
		for i, c := range copies {
			if len(c.Data) > 0 {
				order = append(order, key{c.Handle, c.Dst, i})
			}
		}
		if !sorted {
			sortKeys(order)
		}
	}

	// First pass: count the groups and the bytes that need a merge buffer,
	// so the output and the merge buffer are each allocated once.
	groups, mergedBytes := 0, 0
	var g group
	for p := 0; p < nonEmpty; p++ {
		i := p
		if order != nil {
			i = order[p].index
		}
		if p > 0 && g.extend(copies, i) {
			continue
		}
		if p > 0 {
			if !g.aliasable(copies) {
				if g.end-g.start > uint64(math.MaxInt-mergedBytes) {
					return nil, 0, totalOverflowError(op, g.handle, g.start, g.end)
				}
				mergedBytes += int(g.end - g.start)
			}
			groups++
		}
		g.begin(copies, i, p)
	}
	if !g.aliasable(copies) {
		if g.end-g.start > uint64(math.MaxInt-mergedBytes) {
			return nil, 0, totalOverflowError(op, g.handle, g.start, g.end)
		}
		mergedBytes += int(g.end - g.start)
	}
	groups++

	// Second pass: the same walk, emitting each group as it closes.
	fused = make([]UploadCopy, 0, groups)
	var buf []byte
	if mergedBytes > 0 {
		buf = make([]byte, mergedBytes)
	}
	for p := 0; p < nonEmpty; p++ {
		i := p
		if order != nil {
			i = order[p].index
		}
		if p > 0 && g.extend(copies, i) {
			continue
		}
		if p > 0 {
			fused, buf = g.emit(fused, buf, copies, order, p)
			bytes += g.end - g.start
		}
		g.begin(copies, i, p)
	}
	fused, _ = g.emit(fused, buf, copies, order, nonEmpty)
	bytes += g.end - g.start
	return fused, bytes, nil
}

// group is the run of same-handle requests being swept: their union
// [start, end), the sorted position lo of the first, and last, the highest
// request index among them (the one whose bytes win everywhere it writes).
type group struct {
	handle, start, end uint64
	lo, last           int
}

func (g *group) begin(copies []UploadCopy, i, p int) {
	c := copies[i]
	*g = group{handle: c.Handle, start: c.Dst, end: c.Dst + uint64(len(c.Data)), lo: p, last: i}
}

// extend adds request i to the group when it has the same handle and
// overlaps or touches the group's range, and reports whether it did.
func (g *group) extend(copies []UploadCopy, i int) bool {
	c := copies[i]
	if c.Handle != g.handle || c.Dst > g.end {
		return false
	}
	g.end = max(g.end, c.Dst+uint64(len(c.Data)))
	g.last = max(g.last, i)
	return true
}

// aliasable reports whether the request issued last in the group covers the
// whole group, so its Data alone is the group's final bytes.
func (g *group) aliasable(copies []UploadCopy) bool {
	c := copies[g.last]
	return c.Dst == g.start && c.Dst+uint64(len(c.Data)) == g.end
}

// emit appends the group (sorted positions g.lo..hi) to fused, aliasing or
// merging into the front of buf, and returns both advanced. Merging writes
// the group's requests in request order so later bytes win.
func (g *group) emit(fused []UploadCopy, buf []byte, copies []UploadCopy, order []key, hi int) ([]UploadCopy, []byte) {
	if g.aliasable(copies) {
		return append(fused, UploadCopy{Handle: g.handle, Dst: g.start, Data: copies[g.last].Data}), buf
	}
	span := int(g.end - g.start)
	dst := buf[:span:span]
	if order == nil {
		// Sorted input: address order within a group is request order.
		for i := g.lo; i < hi; i++ {
			c := copies[i]
			copy(dst[c.Dst-g.start:], c.Data)
		}
	} else {
		// The group's address order is no longer needed: reuse its slice of
		// the scratch list to put the members in request order.
		members := order[g.lo:hi]
		slices.SortFunc(members, func(a, b key) int { return a.index - b.index })
		for _, k := range members {
			c := copies[k.index]
			copy(dst[c.Dst-g.start:], c.Data)
		}
	}
	return append(fused, UploadCopy{Handle: g.handle, Dst: g.start, Data: dst}), buf[span:]
}
