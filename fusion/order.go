package fusion

import (
	"math"
	"math/bits"
	"slices"
	"sync"
)

// key orders requests by handle, then address, then request index. The index
// tie-break keeps the order total, so equal (handle, address) pairs stay in
// request order.
type key struct {
	handle, addr uint64
	index        int
}

// before reports whether a sorts before b by (handle, addr). Requests are
// visited in index order, so "not before" is enough to keep ties in order.
func before(a, b key) bool {
	return a.handle < b.handle || a.handle == b.handle && a.addr < b.addr
}

func compareKeys(a, b key) int {
	switch {
	case a.handle != b.handle:
		if a.handle < b.handle {
			return -1
		}
		return 1
	case a.addr != b.addr:
		if a.addr < b.addr {
			return -1
		}
		return 1
	}
	return a.index - b.index
}

// scratchPool recycles sort scratch between calls: it holds *[]key.
// Keys hold no pointers, so a pooled buffer keeps no caller memory alive.
var scratchPool sync.Pool

// maxPooledKeys bounds what the pool keeps (1.5 MiB of keys), so one huge
// batch does not pin its scratch for the life of the process.
const maxPooledKeys = 1 << 16

// getScratch returns an empty key slice with capacity at least n.
func getScratch(n int) *[]key {
	if p, ok := scratchPool.Get().(*[]key); ok && cap(*p) >= n {
		*p = (*p)[:0]
		return p
	}
	s := make([]key, 0, n)
	return &s
}

func putScratch(p *[]key) {
	if cap(*p) <= maxPooledKeys {
		scratchPool.Put(p)
	}
}

// sortHook, when set by a test, runs on every sortKeys call, so tests can
// prove sorted input is never sorted.
var sortHook func()

// smallSort is the size below which a comparison sort beats the radix
// passes' fixed cost of clearing and scanning their counters.
const smallSort = 48

// maxDigitBits bounds a radix digit: 2^11 counters fit easily on the stack.
const maxDigitBits = 11

// sortKeys orders keys, which must arrive in index order, by (handle, addr,
// index). tmp is scratch of the same length. Larger inputs use an LSD radix
// sort over only the bit range where keys differ (addresses first, then
// handles): it is stable, so equal (handle, addr) pairs keep index order,
// and it costs a few linear passes where a comparison sort of 1024 keys
// costs ~10k comparisons.
func sortKeys(keys, tmp []key) {
	if sortHook != nil {
		sortHook()
	}
	if len(keys) < smallSort || len(keys) > math.MaxInt32 {
		slices.SortFunc(keys, compareKeys)
		return
	}
	andH, orH, andA, orA := ^uint64(0), uint64(0), ^uint64(0), uint64(0)
	for _, k := range keys {
		andH &= k.handle
		orH |= k.handle
		andA &= k.addr
		orA |= k.addr
	}
	// Digits about as wide as log2(n) keep the counters near n in number.
	width := min(max(bits.Len(uint(len(keys))), 4), maxDigitBits)
	src, dst := keys, tmp[:len(keys)]
	var counts [1 << maxDigitBits]int32 // int32: len(keys) <= MaxInt32
	for _, byHandle := range [2]bool{false, true} {
		diff := andA ^ orA
		if byHandle {
			diff = andH ^ orH
		}
		if diff == 0 {
			continue
		}
		lo, hi := bits.TrailingZeros64(diff), 64-bits.LeadingZeros64(diff)
		passes := (hi - lo + width - 1) / width
		step := (hi - lo + passes - 1) / passes // spread the bits evenly
		for shift := lo; shift < hi; shift += step {
			radixPass(src, dst, counts[:1<<min(step, hi-shift)], byHandle, uint(shift))
			src, dst = dst, src
		}
	}
	if &src[0] != &keys[0] {
		copy(keys, src)
	}
}

// radixPass stably scatters src into dst by the digit at shift in the
// handle (byHandle) or the address; the digit has log2(len(count)) bits.
func radixPass(src, dst []key, count []int32, byHandle bool, shift uint) {
	clear(count)
	mask := uint64(len(count) - 1)
	if byHandle {
		for _, k := range src {
			count[(k.handle>>shift)&mask]++
		}
	} else {
		for _, k := range src {
			count[(k.addr>>shift)&mask]++
		}
	}
	pos := int32(0)
	for d, c := range count {
		count[d] = pos
		pos += c
	}
	if byHandle {
		for _, k := range src {
			d := (k.handle >> shift) & mask
			dst[count[d]] = k
			count[d]++
		}
	} else {
		for _, k := range src {
			d := (k.addr >> shift) & mask
			dst[count[d]] = k
			count[d]++
		}
	}
}

// sortByIndex puts a merge group's members back in request order. Groups
// are usually a handful of requests, where insertion sort is fastest.
func sortByIndex(members []key) {
	if len(members) > smallSort {
		slices.SortFunc(members, func(a, b key) int { return a.index - b.index })
		return
	}
	for i := 1; i < len(members); i++ {
		for j := i; j > 0 && members[j-1].index > members[j].index; j-- {
			members[j-1], members[j] = members[j], members[j-1]
		}
	}
}
