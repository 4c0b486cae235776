package core

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// A synchronous transfer call (Upload, Download, DownloadMany) holds
// its buffers in flight only while it runs. Rather than one atomic
// increment and decrement per buffer (for 1024 buffers about as much host
// time as the rest of the call's bookkeeping, the decrements mostly cache
// misses after the call's own copying), it registers its whole list of
// entries once in batchPins and removes it once. A buffer's uses are then
// its entry's inflight count plus its occurrences in the registered lists;
// readers (Free, Close, the optimizer dispatcher) hold store.mu
// exclusively or shared and count both, so ErrInFlight stays exact.

// batchPins is the entry lists of synchronous calls in progress.
type batchPins struct {
	mu   sync.Mutex
	live [][]*residentEntry
	n    atomic.Int32 // len(live), read without mu: zero means nothing to scan
}

// add registers ents (non-empty) as in flight. Callers hold store.mu
// shared, after validating every entry, so no Free can remove one
// of them in between.
func (p *batchPins) add(ents []*residentEntry) {
	p.mu.Lock()
	p.live = append(p.live, ents)
	p.n.Store(int32(len(p.live)))
	p.mu.Unlock()
}

// remove drops the list add registered (the same slice); it reports false
// when no such list is registered.
func (p *batchPins) remove(ents []*residentEntry) bool {
	key := unsafe.SliceData(ents)
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, l := range p.live {
		if unsafe.SliceData(l) == key && len(l) == len(ents) {
			last := len(p.live) - 1
			p.live[i] = p.live[last]
			p.live[last] = nil
			p.live = p.live[:last]
			p.n.Store(int32(last))
			return true
		}
	}
	return false
}

// count returns e's occurrences in the registered lists.
func (p *batchPins) count(e *residentEntry) int64 {
	if p.n.Load() == 0 {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var n int64
	for _, l := range p.live {
		for _, x := range l {
			if x == e {
				n++
			}
		}
	}
	return n
}

// counts returns every registered entry's occurrences, or nil when none is
// registered.
func (p *batchPins) counts() map[*residentEntry]int64 {
	if p.n.Load() == 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	m := make(map[*residentEntry]int64)
	for _, l := range p.live {
		for _, x := range l {
			m[x]++
		}
	}
	return m
}

// uses returns e's in-flight uses: its own count plus its occurrences in
// the lists of synchronous calls in progress. Callers hold mu (either mode).
func (s *residentStore) uses(e *residentEntry) int64 {
	return e.inflight.Load() + s.batches.count(e)
}

// pinCall marks ents, validated under store.mu held shared by the caller,
// in flight for a synchronous call; unpinCall ends that.
func (s *residentStore) pinCall(ents []*residentEntry) {
	runPinHook(s)
	s.batches.add(ents)
}

// unpinCall ends pinCall's mark. A list that was never registered means
// the accounting is broken; it is logged.
func (s *residentStore) unpinCall(op string, ents []*residentEntry) {
	if !s.batches.remove(ents) {
		s.log.Error("synchronous transfer's in-flight mark was already gone", "op", op, "buffers", len(ents))
	}
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

// dedupeBuffers returns bufs without repeats (uniq), the position in bufs
// where each of uniq first appears, and for every position of bufs its
// index in uniq. Small batches compare pairwise; larger ones use a map.
func dedupeBuffers(bufs []Buffer) (uniq []Buffer, first, slot []int) {
	if increasingIDs(bufs) {
		// Already distinct (the usual many-buffer batch): no map.
		first = make([]int, len(bufs))
		for i := range first {
			first[i] = i
		}
		return bufs, first, first
	}
	uniq = make([]Buffer, 0, len(bufs))
	first = make([]int, 0, len(bufs))
	slot = make([]int, len(bufs))
	var index map[Buffer]int
	if len(bufs) > 16 {
		index = make(map[Buffer]int, len(bufs))
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
