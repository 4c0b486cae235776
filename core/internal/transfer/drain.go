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
