package fusion

import (
	"fmt"
	"math"

	"github.com/vyre-go/vyrecuda/accounting"
)

// PeerCopy is one device-to-device copy request: Len bytes from device
// address Src to device address Dst (on the same device or on two).
type PeerCopy struct {
	Dst, Src uint64
	Len      int
}

// FusePeerCopies returns the fewest copies that, run in order, move the same
// bytes as copies run in order, and the bytes they move.
//
// Order is kept: a later copy may read what an earlier one wrote, or write
// over it. Consecutive requests merge when the second continues the first on
// both sides (it starts where the first ended, at the source and at the
// destination) and the merged source and destination ranges do not overlap
// (a chain that reads what it just wrote must run piece by piece); empty
// requests are dropped. The result is never longer than
// copies, and bytes equals the sum of the requested lengths. A negative
// length is an error wrapping accounting.ErrNegative; a range that does not
// fit in 64 bits one wrapping accounting.ErrOverflow (runs that would grow
// past the largest int stay split). copies is never modified.
func FusePeerCopies(copies []PeerCopy) (fused []PeerCopy, bytes uint64, err error) {
	const op = "FusePeerCopies"
	n := 0
	for i, c := range copies {
		switch {
		case c.Len < 0:
			return nil, 0, &accounting.Error{Op: op, Err: accounting.ErrNegative,
				Detail: fmt.Sprintf("request %d has length %d", i, c.Len), Fix: "pass a length of zero or more"}
		case c.Len == 0:
			continue
		case uint64(c.Len) > math.MaxUint64-c.Dst || uint64(c.Len) > math.MaxUint64-c.Src:
			return nil, 0, &accounting.Error{Op: op, Err: accounting.ErrOverflow,
				Detail: fmt.Sprintf("request %d: %d bytes from %#x to %#x do not fit in 64 bits", i, c.Len, c.Src, c.Dst),
				Fix:    "pass addresses and lengths inside the buffers"}
		}
		n++
	}
	if n == 0 {
		return nil, 0, nil
	}
	fused = make([]PeerCopy, 0, n)
	for _, c := range copies {
		if c.Len == 0 {
			continue
		}
		bytes += uint64(c.Len)
		if k := len(fused) - 1; k >= 0 {
			last := &fused[k]
			if last.Dst+uint64(last.Len) == c.Dst && last.Src+uint64(last.Len) == c.Src && last.Len <= math.MaxInt-c.Len &&
				disjoint(last.Dst, last.Src, uint64(last.Len+c.Len)) {
				last.Len += c.Len
				continue
			}
		}
		fused = append(fused, c)
	}
	return fused, bytes, nil
}

// disjoint reports whether [a, a+n) and [b, b+n) do not overlap.
func disjoint(a, b, n uint64) bool { return a+n <= b || b+n <= a }
