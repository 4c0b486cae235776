package core

// pinBatch pins the distinct buffers of a batch once each, so an entry's
// in-flight count counts unfinished batches (what Free's message
// reports), and returns the entry of every position of bufs (ents) and the
// pinned entries to release (pinned), both in one allocation.
func (b *Backend) pinBatch(op string, bufs []Buffer, lay *batchLayout) (ents, pinned []*residentEntry, err error) {
	var uniqA [dedupePairwise]Buffer
	var firstA, slotA [dedupePairwise]int
	uniq, first, slot := dedupeBuffers(bufs, uniqA[:0], firstA[:0], slotA[:0])
	all := make([]*residentEntry, len(uniq)+len(bufs))
	pinned, ents = all[:len(uniq):len(uniq)], all[len(uniq):]
	err = b.store.pinInto(op, pinned, func(i int) Buffer { return uniq[i] }, func(i int) string { return lay.label(first[i]) })
	if err != nil {
		return nil, nil, err
	}
	for i := range bufs {
		ents[i] = pinned[slot[i]]
	}
	return ents, pinned, nil
}

// increasingIDs reports whether bufs' IDs strictly increase, so no two
// are the same buffer.
func increasingIDs(bufs []Buffer) bool {
	for i := 1; i < len(bufs); i++ {
		if bufs[i].ID <= bufs[i-1].ID {
			return false
		}
	}
	return true
}

// dedupePairwise is the most buffers dedupeBuffers compares pairwise;
// larger lists use a map.
const dedupePairwise = 16

// dedupeBuffers returns bufs without repeats (uniq), the position in bufs
// where each of uniq first appears, and for every position of bufs its
// index in uniq. It builds them in the storage of uniq, first and slot
// (empty) where their capacity suffices. Small batches compare pairwise;
// larger ones use a map.
func dedupeBuffers(bufs, uniq []Buffer, first, slot []int) ([]Buffer, []int, []int) {
	n := len(bufs)
	if cap(first) < n {
		first = make([]int, 0, n)
	}
	if increasingIDs(bufs) {
		// Already distinct (the usual many-buffer batch): no map.
		first = first[:n]
		for i := range first {
			first[i] = i
		}
		return bufs, first, first
	}
	if cap(uniq) < n {
		uniq = make([]Buffer, 0, n)
	}
	if cap(slot) < n {
		slot = make([]int, n)
	}
	slot = slot[:n]
	var index map[Buffer]int
	if n > dedupePairwise {
		index = make(map[Buffer]int, n)
	}
	for i, h := range bufs {
		k := -1
		if index != nil {
			if j, ok := index[h]; ok {
				k = j
			}
		} else {
			for j, u := range uniq {
				if u == h {
					k = j
					break
				}
			}
		}
		if k < 0 {
			k = len(uniq)
			uniq = append(uniq, h)
			first = append(first, i)
			if index != nil {
				index[h] = k
			}
		}
		slot[i] = k
	}
	return uniq, first, slot
}
