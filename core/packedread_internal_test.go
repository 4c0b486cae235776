package core

import (
	"math/rand"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/fusion"
)

// TestPartRunCoversEveryRequestOnce: for random copies, requests (whole
// copies, or views onto them in any order, empty ones among them), part
// counts and worker counts, the parts are contiguous, non-empty and cover
// every copy; every request is copied out by exactly one task; and that
// task opens no earlier than the part holding the request's bytes, so no
// request is read before its part has landed.
func TestPartRunCoversEveryRequestOnce(t *testing.T) {
	r := rand.New(rand.NewSource(11))
	for c := 0; c < 500; c++ {
		nCopies := 1 + r.Intn(40)
		copies := make([]fusion.ReadbackCopy, nCopies)
		lay := newPackLayout(nCopies, func(i int) int {
			copies[i].Len = r.Intn(5000)
			return copies[i].Len
		})
		g := &gathered{tune: transferTuning{}}
		if r.Intn(2) == 0 {
			g.lens = make([]int, nCopies)
			for i := range copies {
				g.lens[i] = copies[i].Len
			}
		} else {
			n := r.Intn(60)
			g.lens = make([]int, n)
			g.views = make([]fusion.ReadbackView, n)
			for i := range g.views {
				s := r.Intn(nCopies)
				if copies[s].Len == 0 || r.Intn(8) == 0 {
					continue // an empty request
				}
				off := r.Intn(copies[s].Len)
				g.views[i] = fusion.ReadbackView{Slot: s, Offset: off, Len: 1 + r.Intn(copies[s].Len-off)}
				g.lens[i] = g.views[i].Len
			}
		}
		parts := 1 + r.Intn(12)
		cb := partBounds(&lay, nCopies, parts)
		require.Equal(t, 0, cb[0])
		require.Equal(t, nCopies, cb[len(cb)-1])
		require.LessOrEqual(t, len(cb)-1, parts)
		partOf := make([]int, nCopies)
		for k := 0; k+1 < len(cb); k++ {
			require.Less(t, cb[k], cb[k+1], "case %d: part %d is empty", c, k)
			for i := cb[k]; i < cb[k+1]; i++ {
				partOf[i] = k
			}
		}
		pr := newPartRun(g, copies, cb, 1+r.Intn(16), 0)
		seen := make([]int, len(g.lens))
		for k := 0; k+1 < len(pr.partTB); k++ {
			for task := pr.partTB[k]; task < pr.partTB[k+1]; task++ {
				for p := pr.tb[task]; p < pr.tb[task+1]; p++ {
					i := pr.at(p)
					seen[i]++
					if g.lens[i] == 0 {
						continue
					}
					slot := i
					if g.views != nil {
						slot = g.views[i].Slot
					}
					require.Equal(t, partOf[slot], k, "case %d: request %d opens with part %d, not with its bytes' part %d", c, i, k, partOf[slot])
				}
			}
		}
		for i, n := range seen {
			require.Equal(t, 1, n, "case %d: request %d copied out %d times", c, i, n)
		}
		require.Equal(t, int64(len(pr.tb)-1), pr.job.Tasks())
	}
}

// TestPartBoundsLeaveTheLastPartHalfAShare: over pieces of one size, the
// last part carries about half the bytes of each other part (the part
// whose copy-out nothing overlaps is the smallest), and the others are
// about equal; every piece is in exactly one part.
func TestPartBoundsLeaveTheLastPartHalfAShare(t *testing.T) {
	for _, tc := range []struct{ n, size, parts int }{{1024, 4096, 5}, {2048, 16, 8}, {90, 1000, 3}, {7, 64, 2}} {
		lay := newPackLayout(tc.n, func(int) int { return tc.size })
		cb := partBounds(&lay, tc.n, tc.parts)
		require.Len(t, cb, tc.parts+1, "%+v", tc)
		require.Equal(t, 0, cb[0])
		require.Equal(t, tc.n, cb[tc.parts])
		share := float64(tc.n) / (float64(tc.parts) - 0.5) // pieces per whole share
		for k := 0; k < tc.parts; k++ {
			want := share
			if k == tc.parts-1 {
				want = share / 2
			}
			got := float64(cb[k+1] - cb[k])
			require.InDelta(t, want, got, 1.01, "%+v: part %d holds %v pieces, want about %.1f", tc, k, got, want)
		}
	}
}
