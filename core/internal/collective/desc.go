package collective

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/errs"
)

// DescBytes is the size of an encoded Desc: DescWords little-endian int64
// words (kind, element count, data type, reduction, root, refused).
const (
	DescWords = 6
	DescBytes = 8 * DescWords
)

// Desc is what one rank of a call across processes tells the others
// before it queues anything: the call (kind, elements per rank block,
// data type, and the reduction or root where the kind has one), or that
// it refused its part (its own arguments, handles or resources failed).
type Desc struct {
	Kind    Kind
	Count   uint64
	DT      driver.DataType
	Red     driver.ReduceOp // zero unless the kind reduces
	Root    int             // zero unless a broadcast
	Refused bool
}

// Desc describes a call of a with count elements per rank block, or a
// refused part when local is not nil.
func (a *Args) Desc(count uint64, local error) Desc {
	d := Desc{Kind: a.Kind, Count: count, DT: a.DT, Refused: local != nil}
	switch a.Kind {
	case AllReduce, ReduceScatter:
		d.Red = a.Red
	case Broadcast:
		d.Root = a.Root
	}
	if d.Refused {
		d.Count = 0
	}
	return d
}

// Put writes d into b's first DescBytes bytes.
func (d Desc) Put(b []byte) {
	refused := int64(0)
	if d.Refused {
		refused = 1
	}
	for i, w := range [DescWords]int64{int64(d.Kind), int64(min(d.Count, math.MaxInt64)), int64(d.DT), int64(d.Red), int64(d.Root), refused} {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(w))
	}
}

// ReadDesc decodes the Desc at the start of b (DescBytes bytes).
func ReadDesc(b []byte) Desc {
	w := func(i int) int64 { return int64(binary.LittleEndian.Uint64(b[8*i:])) }
	return Desc{Kind: Kind(w(0)), Count: uint64(w(1)), DT: driver.DataType(w(2)), Red: driver.ReduceOp(w(3)),
		Root: int(w(4)), Refused: w(5) != 0}
}

// String describes the call, e.g. "AllReduce of 100 float32 (sum)".
func (d Desc) String() string {
	if d.Refused {
		return "refused its part"
	}
	s := fmt.Sprintf("%s of %d %s", d.Kind, d.Count, d.DT)
	switch {
	case d.Kind == Broadcast:
		s += fmt.Sprintf(" from root %d", d.Root)
	case d.Red != 0:
		s += fmt.Sprintf(" (%s)", d.Red)
	}
	return s
}

// Agreement checks the Descs of every rank (descs[r] is rank r's). It
// returns nil when they are equal and none refused; otherwise an
// ErrInvalidArgument that lists each distinct call with the ranks that
// made it, the same text on every rank.
func Agreement(op string, descs []Desc) error {
	same, refused := true, false
	for _, d := range descs {
		same = same && d == descs[0]
		refused = refused || d.Refused
	}
	if same && !refused {
		return nil
	}
	var b strings.Builder
	b.WriteString("the ranks' calls differ: ")
	done := make([]bool, len(descs))
	for i, d := range descs {
		if done[i] {
			continue
		}
		var ranks []string
		for j := i; j < len(descs); j++ {
			if !done[j] && descs[j] == d {
				done[j] = true
				ranks = append(ranks, fmt.Sprint(j))
			}
		}
		if i > 0 {
			b.WriteString("; ")
		}
		word := "rank "
		if len(ranks) > 1 {
			word = "ranks "
		}
		fmt.Fprintf(&b, "%s%s: %s", word, strings.Join(ranks, ", "), d)
	}
	if refused {
		b.WriteString(" (a rank that refused its part says why in its own error); nothing was queued")
		return errs.New(op, errs.KindInvalidArgument, b.String(), "fix the call of the rank that refused its part, as its own error says")
	}
	b.WriteString("; nothing was queued")
	return errs.New(op, errs.KindInvalidArgument, b.String(), "pass the same collective, data type, reduction and root on every rank, and "+shapeRule)
}
