package core_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/xferplan"
)

// TestTransferAllocationsDoNotGrowWithItems: a batched upload or readback
// allocates the same number of times for 64 items as for 1024: nothing on
// the hot path allocates per item. It runs the packed plan, the one many
// items take; the per-copy plan makes a driver call per copy, and the
// simulated device allocates for every call it queues. Helpers are parked
// (linger off) so their timers do not count, and the plans use one copy
// worker (as AllocsPerRun's GOMAXPROCS 1 gave them before the simulated
// device fixed the planner's parallelism), so no helper is woken.
func TestTransferAllocationsDoNotGrowWithItems(t *testing.T) {
	plans := map[string]core.Option{
		"packed": core.WithPlanTuning(xferplan.Tuning{Only: xferplan.Kinds(xferplan.Packed), PackMinCopies: 2, MaxWorkers: 1}),
	}
	for name, opt := range plans {
		t.Run(name, func(t *testing.T) {
			b, _ := openSim(t, sim.Config{}, opt, core.WithCopyHelperLinger(0))
			allocs := func(n int) (up, down float64) {
				hs := make([]core.Buffer, n)
				ups := make([]core.UploadAt, n)
				for i := range hs {
					h, err := b.Alloc(64)
					require.NoError(t, err)
					hs[i], ups[i] = h, core.UploadAt{Buf: h, Data: make([]byte, 64)}
				}
				dst := make([][]byte, n)
				for i := range dst {
					dst[i] = make([]byte, 0, 64)
				}
				rs := allOf(hs)
				up = testing.AllocsPerRun(20, func() { require.NoError(t, b.Upload(ups...)) })
				down = testing.AllocsPerRun(20, func() {
					var err error
					dst, err = b.DownloadMany(rs, dst)
					require.NoError(t, err)
				})
				for _, h := range hs {
					require.NoError(t, b.Free(h))
				}
				return up, down
			}
			up64, down64 := allocs(64)
			up1k, down1k := allocs(1024)
			t.Logf("uploads %v / %v allocs, readbacks %v / %v (64 / 1024 items)", up64, up1k, down64, down1k)
			assert.LessOrEqual(t, up1k, up64+2, "upload allocations per call grow with the items")
			assert.LessOrEqual(t, down1k, down64+2, "readback allocations per call grow with the items")
		})
	}
}
