package transfer

import (
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newPartRun runs the copy-out that PlanParts plans as one gated copy job
// with a task per run of requests, and evicts each request's staging as it
// copies it out exactly when the readback's size says so (EvictsOverlapped).
func TestNewPartRunRunsItsPlanAsOneJob(t *testing.T) {
	r := rand.New(rand.NewSource(11))
	for c := 0; c < 100; c++ {
		n := 1 + r.Intn(40)
		lens := make([]int, n)
		lay := NewLayout(n, func(i int) int {
			lens[i] = r.Intn(5000)
			return lens[i]
		})
		cb := PartBounds(&lay, n, 1+r.Intn(12))
		g := &Read{lens: lens}
		pr := newPartRun(g, cb, 1+r.Intn(16), 0)
		require.Equal(t, int64(len(pr.TB)-1), pr.job.Tasks(), "case %d", c)
		require.False(t, pr.evict, "case %d: nothing landed, nothing to evict", c)
	}
	for _, tc := range []struct {
		bytes int
		evict bool
	}{{512 << 10, false}, {2 << 20, true}, {16 << 20, true}, {16<<20 + 1, false}} {
		g := &Read{lens: []int{tc.bytes}, stage: make([]byte, tc.bytes)}
		assert.Equal(t, tc.evict, newPartRun(g, []int{0, 1}, 4, 0).evict, "%d bytes", tc.bytes)
	}
}
