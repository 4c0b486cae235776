package copyjob

import (
	"fmt"
	"math"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
			ForParts(tt.n, tt.w, DefaultLinger, func(i int) int { return starts[i] }, starts[tt.n], func(lo, hi int) {
				parts.Add(1)
				for i := lo; i < hi; i++ {
					seen[i].Add(1)
				}
			})
			for i := range seen {
				assert.Equal(t, int32(1), seen[i].Load(), "item %d", i)
			}
			assert.LessOrEqual(t, parts.Load(), int32(max(tt.w*TasksPerWorker, 1)))
		})
	}
}

// settle waits up to 5 s for the copy helpers to exit and the goroutine
// count to fall to at most n (polled here rather than with
// assert.Eventually, whose condition runs on a goroutine of its own).
func settle(n int) {
	deadline := time.Now().Add(5 * time.Second)
	for (helpers.live.Load() > 0 || runtime.NumGoroutine() > n) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}

func TestRunTasksRunsEachTaskOnceAndLeavesNoGoroutine(t *testing.T) {
	settle(math.MaxInt) // helpers of earlier tests
	before := runtime.NumGoroutine()
	for _, n := range []int{0, 1, 2, 7, 64, 1000} {
		for _, w := range []int{0, 1, 2, 5, 16} {
			seen := make([]atomic.Int32, n)
			RunTasks(n, w, DefaultLinger, func(i int) { seen[i].Add(1) })
			// Every task has returned by the time RunTasks does.
			for i := range seen {
				require.Equal(t, int32(1), seen[i].Load(), "n=%d w=%d task %d", n, w, i)
			}
		}
	}
	// Helpers that found no task left, and idle polling helpers, exit on
	// their own.
	settle(before)
	assert.LessOrEqual(t, runtime.NumGoroutine(), before, "goroutines left running")
	assert.Zero(t, helpers.live.Load(), "copy helpers left running")
}

func TestCopyTaskKeepsLargeCopiesNonTemporal(t *testing.T) {
	tests := []struct{ n, w, want int }{
		{32 << 20, 16, 1 << 20},  // 2 tasks each of 1 MiB rather than 4 of 512 KiB
		{256 << 20, 16, 4 << 20}, // 4 tasks each
		{4 << 20, 16, 256 << 10}, // too small for 1 MiB tasks: one each
		{1000, 3, 384},           // whole cache lines
		{10, 16, 64},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, CopyTask(tt.n, tt.w), "n=%d w=%d", tt.n, tt.w)
	}
}

func TestRunTasksConcurrentJobsAllComplete(t *testing.T) {
	for _, spin := range []time.Duration{-1, 0, DefaultLinger} {
		const jobs, n = 8, 200
		var seen [jobs][n]atomic.Int32
		done := make(chan struct{})
		for k := range jobs {
			// One job at a time is shared with the helpers; the others start their own.
			go func() {
				RunTasks(n, 4, spin, func(i int) { seen[k][i].Add(1) })
				done <- struct{}{}
			}()
		}
		for range jobs {
			<-done
		}
		for k := range seen {
			for i := range seen[k] {
				require.Equal(t, int32(1), seen[k][i].Load(), "spin %v job %d task %d", spin, k, i)
			}
		}
	}
}
