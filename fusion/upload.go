package fusion

import "math"

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
// Requests already ordered by (handle, dst) are fused without a sort, and
// without scratch when they hold no empty copies; non-empty ones in
// strictly increasing handle order (one copy per buffer) skip the sweep. Scratch is recycled, so
// steady use allocates only the result and the merge buffer. An address range that does
// not fit in 64 bits is an error wrapping accounting.ErrOverflow; copies is
// never modified, and nothing is allocated for input that fails.
func FuseUploads(copies []UploadCopy) (fused []UploadCopy, bytes uint64, err error) {
	if bytes, ok := distinctUploads(copies); ok {
		// Every request is a group of its own and aliases its Data.
		return append([]UploadCopy(nil), copies...), bytes, nil
	}
	sc, err := scanUploads(copies)
	if err != nil {
		return nil, 0, err
	}
	if sc.nonEmpty == 0 {
		return nil, 0, nil
	}

	// Visit the non-empty requests in (handle, dst, index) order: directly
	// when the input is sorted without empties, otherwise through a sorted
	// list of keys. Position p runs over copies or over order.
	var order []key
	if !sc.sorted || sc.nonEmpty != len(copies) {
		// Unsorted input also needs room for the radix sort's second buffer.
		size := sc.nonEmpty
		if !sc.sorted {
			size *= 2
		}
		sp := getScratch(size)
		defer putScratch(sp)
		scratch := *sp
		order = scratch[:0:sc.nonEmpty]
		for i := range copies {
			if c := &copies[i]; len(c.Data) > 0 {
				order = append(order, key{c.Handle, c.Dst, i})
			}
		}
		if !sc.sorted {
			sortKeys(order, scratch[sc.nonEmpty:2*sc.nonEmpty])
			if err := sc.recount(copies, order); err != nil {
				return nil, 0, err
			}
		}
	}
	if sc.merged, err = sc.g.count(sc.merged); err != nil {
		return nil, 0, err
	}
	sc.groups++
	fused, bytes = emitUploads(copies, order, sc.groups, sc.merged)
	return fused, bytes, nil
}

// uploadScan is what FuseUploads' first pass learns: whether the non-empty
// requests are ordered by (handle, dst), how many there are and, for
// ordered input, the groups closed so far, the merge-buffer bytes they need
// and the group still open at the end.
type uploadScan struct {
	sorted         bool
	nonEmpty       int
	groups, merged int
	g              openGroup
}

// scanUploads validates copies (no range past 64 bits) and, while the input
// stays sorted, counts the groups and the merge-buffer bytes the output
// needs, in one pass.
func scanUploads(copies []UploadCopy) (uploadScan, error) {
	// The sweeps keep the open group in scalar locals or a local struct
	// rather than behind a pointer: copies through memory cost
	// store-forwarding stalls that dominated the profile.
	sorted := true
	nonEmpty := 0
	var prevHandle, prevDst uint64
	var g openGroup
	groups, merged := 0, 0
	var err error
	for i := range copies {
		c := &copies[i]
		n := len(c.Data)
		if n == 0 {
			continue
		}
		handle, dst := c.Handle, c.Dst
		if uint64(n) > math.MaxUint64-dst {
			return uploadScan{}, overflowError("FuseUploads", "dst", i, handle, dst, n)
		}
		end := dst + uint64(n)
		if nonEmpty > 0 && (handle < prevHandle || handle == prevHandle && dst < prevDst) {
			sorted = false
		}
		prevHandle, prevDst = handle, dst
		if sorted {
			if nonEmpty > 0 && handle == g.handle && dst <= g.end {
				g.end = max(g.end, end)
				g.last, g.lastDst, g.lastEnd = i, dst, end // sorted: i is the latest
			} else {
				if nonEmpty > 0 {
					if merged, err = g.count(merged); err != nil {
						return uploadScan{}, err
					}
					groups++
				}
				g = openGroup{handle, dst, end, dst, end, i, i}
			}
		}
		nonEmpty++
	}
	return uploadScan{sorted: sorted, nonEmpty: nonEmpty, groups: groups, merged: merged, g: g}, nil
}

// recount redoes the group count over the sorted keys of unsorted input,
// leaving the last group open in sc.g.
func (sc *uploadScan) recount(copies []UploadCopy, order []key) error {
	var g openGroup
	groups, merged := 0, 0
	var err error
	for p, k := range order {
		end := k.addr + uint64(len(copies[k.index].Data))
		if p > 0 && k.handle == g.handle && k.addr <= g.end {
			g.end = max(g.end, end)
			if k.index > g.last {
				g.last, g.lastDst, g.lastEnd = k.index, k.addr, end
			}
			continue
		}
		if p > 0 {
			if merged, err = g.count(merged); err != nil {
				return err
			}
			groups++
		}
		g = openGroup{k.handle, k.addr, end, k.addr, end, k.index, p}
	}
	sc.groups, sc.merged, sc.g = groups, merged, g
	return nil
}

// emitUploads is FuseUploads' second pass: the same walk as the count
// (over copies, or over order when it is not nil), emitting each of the
// groups as it closes into one merge buffer of merged bytes. The open group
// lives in scalar locals here, the hottest loop.
func emitUploads(copies []UploadCopy, order []key, groups, merged int) (fused []UploadCopy, bytes uint64) {
	fused = make([]UploadCopy, 0, groups)
	var buf []byte
	if merged > 0 {
		buf = make([]byte, merged)
	}
	limit := len(copies)
	if order != nil {
		limit = len(order)
	}
	var gHandle, gStart, gEnd, gLastDst, gLastEnd uint64
	gLast, gLo := 0, 0
	for p := 0; p < limit; p++ {
		i := p
		if order != nil {
			i = order[p].index
		}
		c := &copies[i]
		handle, dst := c.Handle, c.Dst
		end := dst + uint64(len(c.Data))
		if p > 0 && handle == gHandle && dst <= gEnd {
			gEnd = max(gEnd, end)
			if i > gLast {
				gLast, gLastDst, gLastEnd = i, dst, end
			}
			continue
		}
		if p > 0 {
			fused, buf = emitGroup(fused, buf, copies, order, gHandle, gStart, gEnd, gLastDst, gLastEnd, gLast, gLo, p)
			bytes += gEnd - gStart
		}
		gHandle, gStart, gEnd, gLastDst, gLastEnd, gLast, gLo = handle, dst, end, dst, end, i, p
	}
	fused, _ = emitGroup(fused, buf, copies, order, gHandle, gStart, gEnd, gLastDst, gLastEnd, gLast, gLo, limit)
	bytes += gEnd - gStart
	return fused, bytes
}

// distinctUploads reports whether copies is the common batch shape that
// fuses to itself: non-empty, in strictly increasing handle order (so no
// two share a handle), no range overflowing. It returns their bytes.
// Anything else, errors included, is left to the general sweep.
func distinctUploads(copies []UploadCopy) (bytes uint64, ok bool) {
	if len(copies) == 0 {
		return 0, false
	}
	prev := copies[0].Handle
	for i := range copies {
		c := &copies[i]
		n := uint64(len(c.Data))
		if n == 0 || n > math.MaxUint64-c.Dst || i > 0 && c.Handle <= prev {
			return 0, false
		}
		prev = c.Handle
		bytes += n
	}
	return bytes, true
}

// openGroup is the run of same-handle requests being swept: their union
// [start, end), and the range and index of last, the request issued last
// among them (its bytes win everywhere it writes). lo is the group's first
// sorted position.
type openGroup struct {
	handle, start, end uint64
	lastDst, lastEnd   uint64
	last, lo           int
}

// aliasable reports whether the request issued last in the group covers the
// whole group, so its Data alone is the group's final bytes.
func (g *openGroup) aliasable() bool {
	return g.lastDst == g.start && g.lastEnd == g.end
}

// count adds the group's merge-buffer bytes, if it needs any, to merged.
func (g *openGroup) count(merged int) (int, error) {
	if g.aliasable() {
		return merged, nil
	}
	span := g.end - g.start
	if span > uint64(math.MaxInt-merged) {
		return merged, totalOverflowError("FuseUploads", g.handle, g.start, g.end)
	}
	return merged + int(span), nil
}

// emitGroup appends the group [start, end) of handle, made of the requests
// at sorted positions lo..hi, to fused, aliasing request last when it covers
// the group ([lastDst, lastEnd) == [start, end)) or else merging into the
// front of buf, and returns both advanced. Merging writes the group's
// requests in request order so later bytes win.
func emitGroup(fused []UploadCopy, buf []byte, copies []UploadCopy, order []key,
	handle, start, end, lastDst, lastEnd uint64, last, lo, hi int) ([]UploadCopy, []byte) {
	if lastDst == start && lastEnd == end {
		return append(fused, UploadCopy{Handle: handle, Dst: start, Data: copies[last].Data}), buf
	}
	span := int(end - start)
	dst := buf[:span:span]
	if order == nil {
		// Sorted input: address order within a group is request order.
		for i := lo; i < hi; i++ {
			c := &copies[i]
			copy(dst[c.Dst-start:], c.Data)
		}
	} else {
		// The group's address order is no longer needed: reuse its slice of
		// the scratch list to put the members in request order. Empty
		// requests never enter order, so every member writes bytes.
		members := order[lo:hi]
		sortByIndex(members)
		for _, k := range members {
			c := &copies[k.index]
			copy(dst[c.Dst-start:], c.Data)
		}
	}
	return append(fused, UploadCopy{Handle: handle, Dst: start, Data: dst}), buf[span:]
}
