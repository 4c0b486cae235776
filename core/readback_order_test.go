package core_test

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/xferplan"
)

// TestManyIntoReadsEveryOrderOfBuffers: a readback batch returns each
// buffer's own bytes in request order whether the batch names its buffers
// once each in allocation order (read without fusing), in reverse, or one
// buffer twice (both fused), by the packed and the per-copy plan.
func TestManyIntoReadsEveryOrderOfBuffers(t *testing.T) {
	plans := map[string]xferplan.Kind{"packed": xferplan.Packed, "per-copy": xferplan.PerCopy}
	for name, kind := range plans {
		t.Run(name, func(t *testing.T) {
			b, _ := openSim(t, sim.Config{}, core.WithPlanTuning(xferplan.Tuning{Only: xferplan.Kinds(kind), PackMinCopies: 2}))
			const n = 40
			hs := make([]core.Buffer, n)
			want := map[uint64][]byte{}
			for i := range hs {
				h, err := b.Alloc(8 + 16*i)
				require.NoError(t, err)
				hs[i] = h
				want[h.ID] = bytes.Repeat([]byte{byte(i + 1)}, h.Len)
				require.NoError(t, b.Upload(core.UploadAt{Buf: h, Data: want[h.ID]}))
			}
			rev := slices.Clone(hs)
			slices.Reverse(rev)
			twice := append(slices.Clone(hs[:5]), hs[2], hs[7])
			for _, batch := range [][]core.Buffer{hs, rev, twice} {
				got, err := b.DownloadMany(allOf(batch), nil)
				require.NoError(t, err)
				require.Len(t, got, len(batch))
				for i, h := range batch {
					require.True(t, bytes.Equal(want[h.ID], got[i]), fmt.Sprintf("slot %d (handle %d)", i, h.ID))
				}
			}
		})
	}
}
