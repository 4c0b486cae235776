package transfer

import (
	"math/rand"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/xferplan"
)

// TestRememberedPlansMatchChoose: whatever order requests, tunings, models
// and parallelism come in (so slots collide and entries are replaced), the
// remembered plan is exactly the one xferplan.Choose makes for the same
// inputs.
func TestRememberedPlansMatchChoose(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	ref, slow := xferplan.Reference(), xferplan.Reference()
	slow.H2D.Gap, slow.D2H.Gap = slow.H2D.Gap*40, slow.D2H.Gap*40
	models := []*xferplan.Model{&ref, &slow}
	tunings := []xferplan.Tuning{{}, {MaxWorkers: 2}, {StageMin: -1}, {Only: xferplan.Kinds(xferplan.Staged)}}
	sizes := []int64{1, 4 << 10, 64 << 10, 256 << 10, 1 << 20, 3<<20 + 7, 16 << 20, 256 << 20}
	for range 3000 {
		r := xferplan.Request{Dir: xferplan.Direction(rng.Intn(2)), Copies: 1 + rng.Intn(3)*rng.Intn(100),
			Bytes: sizes[rng.Intn(len(sizes))], Pinned: rng.Intn(4) == 0, Streamable: rng.Intn(2) == 0}
		if rng.Intn(2) == 0 {
			r.PackedBytes = PackedBound(r.Copies, uint64(r.Bytes))
		}
		tu, m, procs := tunings[rng.Intn(len(tunings))], models[rng.Intn(len(models))], 1+rng.Intn(16)
		require.Equal(t, xferplan.Choose(r, tu, m, procs), choosePlan(r, tu, m, procs), "%+v %+v procs %d", r, tu, procs)
	}
}
