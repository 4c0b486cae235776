package collective

import (
	"fmt"
	"strings"

	"github.com/vyre-go/vyrecuda/core/internal/errs"
)

// shapeRule is the Fix of a call whose ranks' shapes do not fit together.
const shapeRule = "give every rank the same element count: equal send and recv for AllReduce and Broadcast, recv = ranks x send for AllGather, send = ranks x recv for ReduceScatter"

// countOf names what the element count of one rank's block measures.
func (k Kind) countOf() string {
	switch k {
	case AllReduce:
		return "elements in send and recv"
	case AllGather:
		return "elements in send"
	}
	return "elements in recv" // Broadcast, ReduceScatter
}

// CheckRanks checks every part's shape (Args.Shape) and that the parts
// agree on the element count per rank block, which it returns. It reads
// only the parts' ranks and lengths and pins nothing: a mismatch fails
// before any part is touched, with an ErrInvalidArgument naming every rank
// and its count. Run calls it first; a caller may call it earlier too.
func CheckRanks(op string, a *Args, parts []*Part) (uint64, error) {
	counts := make([]uint64, len(parts))
	for i, c := range parts {
		n, err := a.Shape(op, c.Rank, c.SendLen, c.RecvLen)
		if err != nil {
			return 0, err
		}
		counts[i] = n
	}
	for _, n := range counts {
		if n != counts[0] {
			var b strings.Builder
			fmt.Fprintf(&b, "the ranks' %s counts differ: ", a.DT)
			for i, c := range parts {
				if i > 0 {
					b.WriteString(", ")
				}
				fmt.Fprintf(&b, "rank %d has %d", c.Rank, counts[i])
			}
			fmt.Fprintf(&b, " %s", a.Kind.countOf())
			return 0, errs.New(op, errs.KindInvalidArgument, b.String(), shapeRule)
		}
	}
	if len(counts) == 0 {
		return 0, nil
	}
	return counts[0], nil
}
