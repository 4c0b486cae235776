package core

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
				err := streamParts(tt.n, tt.parts, tt.w, DefaultCopyHelperLinger, func(i int) int { return starts[i] }, starts[tt.n],
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
	err := streamParts(4096, 8, 8, DefaultCopyHelperLinger, func(i int) int { return i }, 4096, func(lo, hi int) {
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
