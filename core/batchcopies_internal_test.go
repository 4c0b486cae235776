package core

import (
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/vyre-go/vyrecuda/fusion"
)

// up is a copy of n bytes to device address dst, for aloneRanges.
func up(dst uint64, n int) fusion.UploadCopy {
	return fusion.UploadCopy{Dst: dst, Data: make([]byte, n)}
}

// TestAloneRanges: a copy is alone exactly when its device range shares
// no byte with any other copy's; ranges that only touch are apart.
func TestAloneRanges(t *testing.T) {
	for _, tc := range []struct {
		name string
		ups  []fusion.UploadCopy
		want []bool
	}{
		{"none", nil, []bool{}},
		{"one", []fusion.UploadCopy{up(100, 8)}, []bool{true}},
		{"apart", []fusion.UploadCopy{up(100, 8), up(200, 8)}, []bool{true, true}},
		{"touching", []fusion.UploadCopy{up(100, 8), up(108, 8)}, []bool{true, true}},
		{"touching, given in reverse", []fusion.UploadCopy{up(108, 8), up(100, 8)}, []bool{true, true}},
		{"touching on both sides", []fusion.UploadCopy{up(108, 4), up(100, 8), up(112, 1)}, []bool{true, true, true}},
		{"one byte in common", []fusion.UploadCopy{up(100, 8), up(107, 8)}, []bool{false, false}},
		{"identical", []fusion.UploadCopy{up(100, 8), up(100, 8)}, []bool{false, false}},
		{"identical among others", []fusion.UploadCopy{up(50, 50), up(100, 8), up(300, 1), up(100, 8), up(108, 2)},
			[]bool{true, false, true, false, true}},
		{"same start, different lengths", []fusion.UploadCopy{up(100, 4), up(100, 8)}, []bool{false, false}},
		{"nested", []fusion.UploadCopy{up(100, 16), up(104, 4)}, []bool{false, false}},
		{"nested, given inner first", []fusion.UploadCopy{up(104, 4), up(100, 16)}, []bool{false, false}},
		{"nested at the end", []fusion.UploadCopy{up(100, 16), up(112, 4), up(116, 4)}, []bool{false, false, true}},
		// The third meets the first, not the second (its neighbour in
		// address order): it is not alone.
		{"meets only an earlier one", []fusion.UploadCopy{up(100, 16), up(101, 1), up(110, 2)}, []bool{false, false, false}},
		{"a chain", []fusion.UploadCopy{up(100, 8), up(104, 8), up(110, 8), up(118, 1)}, []bool{false, false, false, true}},
		{"interleaved with an apart one", []fusion.UploadCopy{up(300, 4), up(100, 8), up(200, 4), up(104, 2)},
			[]bool{true, false, true, false}},
		{"high addresses", []fusion.UploadCopy{up(1<<63, 8), up(1<<63+8, 8), up(1<<62, 1<<10), up(1<<62+1<<9, 1)},
			[]bool{true, true, false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, aloneRanges(tc.ups))
		})
	}
}

// TestAloneRangesAgreesWithPairs checks aloneRanges against comparing
// every pair of copies, on random copies crowded into a small range.
func TestAloneRangesAgreesWithPairs(t *testing.T) {
	r := rand.New(rand.NewSource(27))
	for range 2000 {
		ups := make([]fusion.UploadCopy, r.Intn(9))
		for i := range ups {
			ups[i] = up(uint64(1000+r.Intn(64)), 1+r.Intn(12))
		}
		want := make([]bool, len(ups))
		for i, a := range ups {
			want[i] = true
			for j, b := range ups {
				aEnd, bEnd := a.Dst+uint64(len(a.Data)), b.Dst+uint64(len(b.Data))
				if i != j && a.Dst < bEnd && b.Dst < aEnd {
					want[i] = false
				}
			}
		}
		if got := aloneRanges(ups); !assert.Equal(t, want, got, "copies %v", ranges(ups)) {
			return
		}
	}
}

// ranges lists the copies' [start, end), for messages.
func ranges(ups []fusion.UploadCopy) [][2]uint64 {
	out := make([][2]uint64, len(ups))
	for i, c := range ups {
		out[i] = [2]uint64{c.Dst, c.Dst + uint64(len(c.Data))}
	}
	return out
}
