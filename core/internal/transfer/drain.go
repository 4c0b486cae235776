package transfer

import "github.com/vyre-go/vyrecuda/fusion"

// A readback of many requests hands its gather a Drain: where each
// request's bytes go. A packed readback planned in several parts
// (xferplan's Drainable requests) copies every request out of the staging
// as soon as the part holding it has landed, while later parts are still on
// their way (PlanParts); the others copy them all out once everything has
// landed. The results stay in the drain's own slice (Res) until the call
// succeeds, so the caller's slot headers change only then.

// Drain is where a readback of many requests puts request i's bytes.
type Drain struct {
	// Dest returns request i's storage of exactly n bytes. It is called
	// once per request, after validation, on any of the copy goroutines.
	Dest func(i, n int) []byte
	// Res[i] holds request i's storage once it has been copied out.
	Res [][]byte
	// Fresh: every request gets new storage (Dest is newSlices), so a run
	// of requests can be copied out into one allocation.
	Fresh bool
}

// newSlices is the Drain Dest of calls that return new slices.
func newSlices(_, n int) []byte { return make([]byte, n) }

// FreshDrain returns the drain of a call that returns new slices into res.
func FreshDrain(res [][]byte) *Drain { return &Drain{Dest: newSlices, Res: res, Fresh: true} }

// SlotDrain returns the drain of a call that reuses the storage of the
// caller's slots dst (SlotDest), collecting the results in res.
func SlotDrain(dst, res [][]byte) *Drain { return &Drain{Dest: SlotDest(dst), Res: res} }

// SlotDest is the Drain Dest of calls that reuse the storage of the
// caller's slots, append-style: request i goes into slot i's storage (any
// slot within dst's capacity) when it is large enough, else into a new
// slice.
func SlotDest(dst [][]byte) func(i, n int) []byte {
	slots := dst[:cap(dst)]
	return func(i, n int) []byte { return ReuseSlot(slots, i, n) }
}

// ReuseSlot returns n bytes of slot i's storage (slots holds every slot
// within the caller's capacity) when it is large enough, else a new slice.
func ReuseSlot(slots [][]byte, i, n int) []byte {
	var s []byte
	if i < len(slots) {
		s = slots[i]
	}
	if cap(s) >= n {
		return s[:n]
	}
	return make([]byte, n)
}

// slotsPool recycles the result slices of the drains of calls into
// caller slots.
var slotsPool SlicePool[[]byte]

// GetSlots returns a pooled slice of n nil slices.
func GetSlots(n int) *[][]byte { return slotsPool.Get(n) }

// PutSlots clears p (it references caller memory) and gives it back.
func PutSlots(p *[][]byte) { slotsPool.Put(p) }

// GrowSlots returns s resliced to n elements, reusing its capacity when it
// suffices and otherwise a new slice that starts with s's elements
// (including those past len within cap, so their storage is reused too).
func GrowSlots[T any](s []T, n int) []T {
	if n <= cap(s) {
		return s[:n]
	}
	out := make([]T, n)
	copy(out, s[:cap(s)])
	return out
}

// FuseReads fuses the requests of a readback. The usual batch (one whole
// buffer per request, handles increasing) is already its own fusion: its
// copies are reqs (scratch the caller owns until the copies are queued and
// fenced) and its Views nil, meaning request i is the whole of copy i, so
// it allocates nothing; anything else goes through fusion.FuseReadbacks.
func FuseReads(reqs []fusion.ReadbackCopy) (fusion.FusedReadbacks, error) {
	if bytes, ok := fusion.DistinctReadbacks(reqs); ok {
		return fusion.FusedReadbacks{Copies: reqs, Bytes: bytes}, nil
	}
	return fusion.FuseReadbacks(reqs)
}

// drainOne copies request i out of the staging into its drain storage.
func (g *Read) drainOne(i int) {
	src := g.bytes(i)
	if g.drain.Fresh && len(src) > 0 {
		// One copy into memory that is not zeroed first (see drainRun).
		g.drain.Res[i] = append([]byte(nil), src...)[:len(src):len(src)]
		return
	}
	out := g.drain.Dest(i, len(src))
	g.copyOut(out, src)
	g.drain.Res[i] = out
}

// DrainAll copies every request not yet copied out (all of them unless a
// packed readback in parts did it as they landed) into the drain.
func (g *Read) DrainAll() {
	if g.drain == nil || g.drained {
		return
	}
	g.eachRun(0, len(g.drain.Res), func(lo, hi int) { g.drainRun(lo, hi, nil) })
	g.drained = true
}

// freshRunMax bounds the bytes of the requests drainRun copies out into
// one shared allocation, and so what one result that outlives the others
// keeps alive.
const freshRunMax = 1 << 20

// freshRunGap is the most staging bytes between two requests that drainRun
// still copies out into one allocation (the packed layout aligns each to
// 16 bytes).
const freshRunGap = 64

// drainRun copies out the requests at positions lo..hi-1, where position p
// holds request at(p) (request p when at is nil). A fresh drain copies each
// stretch of requests that lie in order in the staging, up to freshRunMax
// bytes, into one new allocation with one copy (append, which neither
// zeroes what it copies over nor takes an allocation per request) and gives
// each request its own window of it, capacity clipped to its length. On
// the reference H100 host, W3's shape into new slices spent most of its
// time allocating and zeroing 1024 slices on 16 goroutines at once.
func (g *Read) drainRun(lo, hi int, at func(p int) int) {
	if at == nil {
		at = func(p int) int { return p }
	}
	for p := lo; p < hi; {
		end := p + 1
		if g.drain.Fresh {
			end = g.freshStretch(p, hi, at)
		}
		if end-p == 1 {
			g.drainOne(at(p))
		} else {
			g.drainShared(p, end, at)
		}
		p = end
	}
}

// freshStretch returns the end of the stretch of requests from position p
// (before hi) that drainShared may copy out together: each non-empty one
// starting at most freshRunGap bytes past the previous one's end, within
// freshRunMax bytes of the first.
func (g *Read) freshStretch(p, hi int, at func(p int) int) int {
	first := g.bytesSpan(at(p))
	if first.n == 0 {
		return p + 1
	}
	prevEnd := first.off + first.n
	end := p + 1
	for ; end < hi; end++ {
		s := g.bytesSpan(at(end))
		if s.n == 0 || s.off < prevEnd || s.off-prevEnd > freshRunGap || s.off+s.n-first.off > freshRunMax {
			break
		}
		prevEnd = s.off + s.n
	}
	return end
}

// span is where a request's bytes lie in the staging.
type span struct{ off, n int }

// bytesSpan returns the staging span of request i (bytes(i) as offsets).
func (g *Read) bytesSpan(i int) span {
	if g.lens[i] == 0 {
		return span{}
	}
	if g.views == nil {
		return span{g.offs[i], g.lens[i]}
	}
	v := g.views[i]
	return span{g.offs[v.Slot] + v.Offset, v.Len}
}

// drainShared copies the stretch of requests at positions lo..hi-1 (as
// freshStretch found it) out of the staging into one new allocation.
func (g *Read) drainShared(lo, hi int, at func(p int) int) {
	base := g.bytesSpan(at(lo)).off
	last := g.bytesSpan(at(hi - 1))
	all := append([]byte(nil), g.stage[base:last.off+last.n]...)
	for p := lo; p < hi; p++ {
		i := at(p)
		s := g.bytesSpan(i)
		a := s.off - base
		g.drain.Res[i] = all[a : a+s.n : a+s.n]
	}
}
