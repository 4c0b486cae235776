package core

import (
	"math/rand"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHandleTableAgreesWithAMap drives the table and a map with the same
// random puts and deletes (ids clustered the way a shared counter hands
// them out, with old and far ids too) and compares every lookup, the count
// and the iteration, and that memory follows the live span.
func TestHandleTableAgreesWithAMap(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	var tab handleTable
	ref := map[uint64]*residentEntry{}
	next := uint64(5000)
	var ids []uint64
	for step := range 20000 {
		switch op := r.Intn(10); {
		case op < 5 || len(ids) == 0:
			id := next
			switch r.Intn(20) {
			case 0:
				id = uint64(r.Intn(5000)) + 1 // older than the span
			case 1:
				id = next + uint64(r.Intn(1<<20)) // far ahead
			default:
				next += uint64(1 + r.Intn(3))
			}
			if ref[id] != nil {
				continue
			}
			e := &residentEntry{n: step + 1}
			tab.put(id, e)
			ref[id] = e
			ids = append(ids, id)
		default:
			k := r.Intn(len(ids))
			id := ids[k]
			ids[k] = ids[len(ids)-1]
			ids = ids[:len(ids)-1]
			tab.del(id)
			delete(ref, id)
			tab.del(id) // twice: ignored
		}
		probe := uint64(r.Intn(int(next) + 10))
		require.Equal(t, ref[probe], tab.get(probe), "step %d id %d", step, probe)
		require.Equal(t, len(ref), tab.len())
	}
	seen := 0
	last := uint64(0)
	tab.each(func(id uint64, e *residentEntry) {
		require.Same(t, ref[id], e)
		require.Greater(t, id+1, last, "id order")
		last, seen = id+1, seen+1
	})
	require.Equal(t, len(ref), seen)
	for id := range ref {
		tab.del(id)
	}
	require.Zero(t, tab.len())
	require.Empty(t, tab.pages, "no pages once nothing is live")
	require.Nil(t, tab.get(1))
}

func TestHandleTableLookupAllocatesNothing(t *testing.T) {
	var tab handleTable
	for id := uint64(1); id <= 4096; id++ {
		tab.put(id, &residentEntry{n: 1})
	}
	allocs := testing.AllocsPerRun(100, func() {
		for id := uint64(1); id <= 4096; id++ {
			if tab.get(id) == nil {
				t.Fatal("missing")
			}
		}
	})
	require.Zero(t, allocs)
}

// An allocate-free loop crosses into a new page every 1024 ids with the
// table empty in between: the dropped page is reused, not reallocated.
func TestHandleTableReusesTheDroppedPage(t *testing.T) {
	var tab handleTable
	e := &residentEntry{n: 1}
	id := uint64(1 << 20)
	allocs := testing.AllocsPerRun(4096, func() {
		tab.put(id, e)
		if tab.get(id) != e {
			t.Fatalf("id %d not found after put", id)
		}
		tab.del(id)
		id++
	})
	if allocs != 0 {
		t.Fatalf("put/del across pages allocated %.2f times per pair", allocs)
	}
	if tab.len() != 0 || tab.get(id-1) != nil {
		t.Fatalf("table not empty: %d live", tab.len())
	}
}
