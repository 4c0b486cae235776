package transfer

import (
	"sync"

	"github.com/vyre-go/vyrecuda/fusion"
)

// maxScratchItems bounds the scratch kept for reuse (about 256 KiB).
const maxScratchItems = 4096

// Scratch is the per-call working memory of a batched transfer (the
// entries of the buffers it pins, of the caller's type E, and the copy
// list), reused across calls so a batch of n items allocates none of it in
// the steady state.
type Scratch[E any] struct {
	Ents []E
	Ups  []fusion.UploadCopy
	rds  []fusion.ReadbackCopy
	n    int // items handed out by Get: Ents and Ups hold references only below it
}

// Reads returns n readback requests of scratch memory.
func (sc *Scratch[E]) Reads(n int) []fusion.ReadbackCopy {
	if cap(sc.rds) < n {
		sc.rds = make([]fusion.ReadbackCopy, n)
	}
	return sc.rds[:n]
}

// ScratchPool recycles Scratch; its zero value is ready.
type ScratchPool[E any] struct{ p sync.Pool }

// Get returns a Scratch with room for n items: Ents holds n of them and
// Ups has room for n.
func (sp *ScratchPool[E]) Get(n int) *Scratch[E] {
	sc, _ := sp.p.Get().(*Scratch[E])
	if sc == nil {
		sc = new(Scratch[E])
	}
	if cap(sc.Ents) < n {
		sc.Ents = make([]E, n)
	}
	if cap(sc.Ups) < n {
		sc.Ups = make([]fusion.UploadCopy, 0, n)
	}
	sc.n = n
	return sc
}

// Put clears what sc references (entries and caller data: only the first
// n items were used, the rest was cleared before) and gives it back.
// Scratch larger than maxScratchItems is dropped rather than kept.
func (sp *ScratchPool[E]) Put(sc *Scratch[E]) {
	clear(sc.Ents[:sc.n])
	clear(sc.Ups[:sc.n])
	if cap(sc.Ents) > maxScratchItems || cap(sc.Ups) > maxScratchItems || cap(sc.rds) > maxScratchItems {
		return
	}
	sc.Ups = sc.Ups[:0]
	sp.p.Put(sc)
}

// SlicePool recycles slices of T for the calls' scratch; its zero value is
// ready.
type SlicePool[T any] struct{ p sync.Pool }

// Get returns a pooled slice of n elements (contents unspecified).
func (sp *SlicePool[T]) Get(n int) *[]T {
	v, _ := sp.p.Get().(*[]T)
	if v == nil {
		v = new([]T)
	}
	if cap(*v) < n {
		*v = make([]T, n)
	}
	*v = (*v)[:n]
	return v
}

// Put clears v (it may reference caller memory) and gives it back unless
// it is larger than maxScratchItems.
func (sp *SlicePool[T]) Put(v *[]T) {
	clear(*v)
	if cap(*v) <= maxScratchItems {
		sp.p.Put(v)
	}
}

var intsPool SlicePool[int]

// GetInts returns a pooled slice of n ints (contents unspecified).
func GetInts(n int) *[]int { return intsPool.Get(n) }

// PutInts gives p back unless it is larger than maxScratchItems.
func PutInts(p *[]int) { intsPool.Put(p) }
