package transfer

import (
	"errors"
	"fmt"
	"math/rand"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/internal/copyjob"
	"github.com/vyre-go/vyrecuda/fusion"
)

// TestStreamPartsReadiesEachPartAfterItsItems: every item is filled exactly
// once, each part is handed to ready exactly once, in order, and only once
// every item of it has been filled; parts never outnumber items.
func TestStreamPartsReadiesEachPartAfterItsItems(t *testing.T) {
	weights := map[string]func(i int) int{
		"even":  func(int) int { return 4096 },
		"mixed": func(i int) int { return 1 << (i * 7 % 19) },
		"heavy": func(i int) int { return map[bool]int{true: 1 << 20}[i == 3] }, // one item holds it all
	}
	for _, tt := range []struct{ n, parts, w int }{
		{1, 1, 1}, {1, 4, 8}, {10, 3, 1}, {10, 3, 4}, {1024, 6, 16}, {7, 7, 3}, {100, 1, 5}, {3, 16, 16}, {2048, 9, 16},
	} {
		for wname, weight := range weights {
			t.Run(fmt.Sprintf("n=%d parts=%d w=%d %s", tt.n, tt.parts, tt.w, wname), func(t *testing.T) {
				starts := make([]int, tt.n+1)
				for i := range tt.n {
					starts[i+1] = starts[i] + weight(i)
				}
				filled := make([]atomic.Int32, tt.n)
				var order []int
				next := 0 // the first item of the next part
				err := StreamParts(tt.n, tt.parts, tt.w, copyjob.DefaultLinger, func(i int) int { return starts[i] }, starts[tt.n],
					func(lo, hi int) {
						for i := lo; i < hi; i++ {
							filled[i].Add(1)
						}
					}, func(k, lo, hi int) error {
						if lo != next || hi < lo {
							return fmt.Errorf("part %d is [%d, %d), want it to start at %d", k, lo, hi, next)
						}
						for i := lo; i < hi; i++ {
							if filled[i].Load() != 1 {
								return fmt.Errorf("part %d readied before item %d was filled", k, i)
							}
						}
						order, next = append(order, k), hi
						return nil
					})
				require.NoError(t, err)
				assert.Equal(t, tt.n, next, "the parts cover every item")
				for i := range filled {
					assert.Equal(t, int32(1), filled[i].Load(), "item %d", i)
				}
				want := make([]int, max(min(tt.parts, tt.n), 1))
				for k := range want {
					want[k] = k
				}
				assert.Equal(t, want, order, "every part once, in order")
			})
		}
	}
}

// TestStreamPartsStopsAfterAFailedReady: after ready fails no later part is
// readied, every fill has returned when streamParts does (nothing runs
// afterwards), and the error comes back.
func TestStreamPartsStopsAfterAFailedReady(t *testing.T) {
	bad := errors.New("queue failed")
	var running, after atomic.Int32
	var done atomic.Bool
	var readied []int
	err := StreamParts(4096, 8, 8, copyjob.DefaultLinger, func(i int) int { return i }, 4096, func(lo, hi int) {
		running.Add(1)
		if done.Load() {
			after.Add(1)
		}
		time.Sleep(time.Microsecond)
		running.Add(-1)
	}, func(k, _, _ int) error {
		readied = append(readied, k)
		if k == 2 {
			return bad
		}
		return nil
	})
	done.Store(true)
	require.ErrorIs(t, err, bad)
	assert.Equal(t, []int{0, 1, 2}, readied)
	time.Sleep(2 * time.Millisecond)
	assert.Zero(t, running.Load(), "no fill runs after streamParts returned")
	assert.Zero(t, after.Load())
}

// TestPlanPartsCoversEveryRequestOnce: for random copies, requests (whole
// copies, or views onto them in any order, empty ones among them), part
// counts and worker counts, the parts are contiguous, non-empty and cover
// every copy; every request is copied out by exactly one task; and that
// task opens no earlier than the part holding the request's bytes, so no
// request is read before its part has landed.
func TestPlanPartsCoversEveryRequestOnce(t *testing.T) {
	r := rand.New(rand.NewSource(11))
	for c := 0; c < 500; c++ {
		nCopies := 1 + r.Intn(40)
		copies := make([]fusion.ReadbackCopy, nCopies)
		lay := NewLayout(nCopies, func(i int) int {
			copies[i].Len = r.Intn(5000)
			return copies[i].Len
		})
		var lens []int
		var views []fusion.ReadbackView
		if r.Intn(2) == 0 {
			lens = make([]int, nCopies)
			for i := range copies {
				lens[i] = copies[i].Len
			}
		} else {
			n := r.Intn(60)
			lens = make([]int, n)
			views = make([]fusion.ReadbackView, n)
			for i := range views {
				s := r.Intn(nCopies)
				if copies[s].Len == 0 || r.Intn(8) == 0 {
					continue // an empty request
				}
				off := r.Intn(copies[s].Len)
				views[i] = fusion.ReadbackView{Slot: s, Offset: off, Len: 1 + r.Intn(copies[s].Len-off)}
				lens[i] = views[i].Len
			}
		}
		parts := 1 + r.Intn(12)
		cb := PartBounds(&lay, nCopies, parts)
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
		pr := PlanParts(lens, views, cb, 1+r.Intn(16))
		seen := make([]int, len(lens))
		for k := 0; k+1 < len(pr.PartTB); k++ {
			for task := pr.PartTB[k]; task < pr.PartTB[k+1]; task++ {
				for p := pr.TB[task]; p < pr.TB[task+1]; p++ {
					i := pr.At(p)
					seen[i]++
					if lens[i] == 0 {
						continue
					}
					slot := i
					if views != nil {
						slot = views[i].Slot
					}
					require.Equal(t, partOf[slot], k, "case %d: request %d opens with part %d, not with its bytes' part %d", c, i, k, partOf[slot])
				}
			}
		}
		for i, n := range seen {
			require.Equal(t, 1, n, "case %d: request %d copied out %d times", c, i, n)
		}
	}
}

// TestPartBoundsLeaveTheLastPartHalfAShare: over pieces of one size, the
// last part carries about half the bytes of each other part (the part
// whose copy-out nothing overlaps is the smallest), and the others are
// about equal; every piece is in exactly one part.
func TestPartBoundsLeaveTheLastPartHalfAShare(t *testing.T) {
	for _, tc := range []struct{ n, size, parts int }{{1024, 4096, 5}, {2048, 16, 8}, {90, 1000, 3}, {7, 64, 2}} {
		lay := NewLayout(tc.n, func(int) int { return tc.size })
		cb := PartBounds(&lay, tc.n, tc.parts)
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
