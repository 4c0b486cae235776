package core

// handleTable maps live Buffer ids to their entries by indexing, not
// hashing: ids come from one process-wide counter, so a Backend's live ids
// are dense except where other Backends took some. The table is a slice of
// fixed-size pages covering the span from the oldest live id's page to the
// newest one's; a lookup is two index operations. Pages are allocated when
// their first id arrives and dropped when their last one leaves, and the
// span's empty front is trimmed, so memory follows the live ids rather
// than every id ever handed out.
//
// handleTable is not safe for concurrent use; residentStore.mu guards it.
type handleTable struct {
	base  uint64 // page number of pages[0]
	pages []*handlePage
	live  int
	// spare is the last page dropped, kept empty for the next page needed:
	// an allocate-free loop crosses into a new page every 1024 ids and would
	// otherwise allocate 8 KiB each time the table empties.
	spare *handlePage
}

// handlePageBits sets the ids per page (1024): 8 KiB of pointers.
const handlePageBits = 10

type handlePage struct {
	ents [1 << handlePageBits]*residentEntry
	live int
}

// get returns id's entry, or nil when id is not live here.
func (t *handleTable) get(id uint64) *residentEntry {
	p := id >> handlePageBits
	if p < t.base || p-t.base >= uint64(len(t.pages)) {
		return nil
	}
	pg := t.pages[p-t.base]
	if pg == nil {
		return nil
	}
	return pg.ents[id&(1<<handlePageBits-1)]
}

// put sets id's entry (e non-nil); id must not be live.
func (t *handleTable) put(id uint64, e *residentEntry) {
	p := id >> handlePageBits
	switch {
	case len(t.pages) == 0:
		t.base = p
		t.pages = append(t.pages[:0], nil)
	case p < t.base:
		// An id older than the span (from a counter shared with other
		// Backends, handed out before this table's first): grow the front.
		grown := make([]*handlePage, t.base-p+uint64(len(t.pages)))
		copy(grown[t.base-p:], t.pages)
		t.pages, t.base = grown, p
	case p-t.base >= uint64(len(t.pages)):
		for uint64(len(t.pages)) <= p-t.base {
			t.pages = append(t.pages, nil)
		}
	}
	pg := t.pages[p-t.base]
	if pg == nil {
		if pg = t.spare; pg != nil {
			t.spare = nil
		} else {
			pg = new(handlePage)
		}
		t.pages[p-t.base] = pg
	}
	slot := &pg.ents[id&(1<<handlePageBits-1)]
	if *slot == nil {
		pg.live++
		t.live++
	}
	*slot = e
}

// del removes id's entry; an id not live is ignored.
func (t *handleTable) del(id uint64) {
	p := id >> handlePageBits
	if p < t.base || p-t.base >= uint64(len(t.pages)) {
		return
	}
	pg := t.pages[p-t.base]
	if pg == nil || pg.ents[id&(1<<handlePageBits-1)] == nil {
		return
	}
	pg.ents[id&(1<<handlePageBits-1)] = nil
	pg.live--
	t.live--
	if pg.live > 0 {
		return
	}
	t.pages[p-t.base] = nil
	t.spare = pg // every entry is nil again
	// Trim empty pages from both ends of the span.
	k := 0
	for k < len(t.pages) && t.pages[k] == nil {
		k++
	}
	if k > 0 {
		n := copy(t.pages, t.pages[k:])
		clear(t.pages[n:])
		t.pages = t.pages[:n]
		t.base += uint64(k)
	}
	for len(t.pages) > 0 && t.pages[len(t.pages)-1] == nil {
		t.pages = t.pages[:len(t.pages)-1]
	}
}

// len returns the number of live entries.
func (t *handleTable) len() int { return t.live }

// each calls f for every live entry, in id order. f must not change t.
func (t *handleTable) each(f func(id uint64, e *residentEntry)) {
	for i, pg := range t.pages {
		if pg == nil {
			continue
		}
		for j, e := range pg.ents {
			if e != nil {
				f((t.base+uint64(i))<<handlePageBits|uint64(j), e)
			}
		}
	}
}

// clear drops every entry.
func (t *handleTable) clear() {
	clear(t.pages)
	t.pages, t.base, t.live = t.pages[:0], 0, 0
}
