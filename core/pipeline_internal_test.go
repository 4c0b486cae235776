package core

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestForPartsCoversEveryItemOnce(t *testing.T) {
	tests := []struct {
		n, w    int
		weights func(i int) int
	}{
		{0, 4, func(int) int { return 1 }},
		{1, 4, func(int) int { return 1 }},
		{10, 1, func(int) int { return 3 }},
		{10, 16, func(int) int { return 3 }},
		{1000, 7, func(i int) int { return i % 13 }},
		{100, 4, func(i int) int { return map[bool]int{true: 1000}[i == 50] }}, // one heavy item
		{64, 8, func(int) int { return 0 }},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("n=%d w=%d", tt.n, tt.w), func(t *testing.T) {
			starts := make([]int, tt.n+1)
			for i := range tt.n {
				starts[i+1] = starts[i] + tt.weights(i)
			}
			seen := make([]atomic.Int32, tt.n)
			var parts atomic.Int32
			forParts(tt.n, tt.w, func(i int) int { return starts[i] }, starts[tt.n], func(lo, hi int) {
				parts.Add(1)
				for i := lo; i < hi; i++ {
					seen[i].Add(1)
				}
			})
			for i := range seen {
				assert.Equal(t, int32(1), seen[i].Load(), "item %d", i)
			}
			assert.LessOrEqual(t, parts.Load(), int32(max(tt.w, 1)))
		})
	}
}

func TestParallelCopy(t *testing.T) {
	for _, n := range []int{0, 1, 63, 64, 65, 1000, 1 << 16} {
		for _, w := range []int{1, 2, 3, 16} {
			src := make([]byte, n)
			for i := range src {
				src[i] = byte(i*7 + 1)
			}
			dst := make([]byte, n)
			parallelCopy(dst, src, w)
			assert.Equal(t, src, dst, "n=%d w=%d", n, w)
		}
	}
}
