package core

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/vyre-go/vyrecuda/xferplan"
)

// The cached plan is the one Choose gives, for repeated questions and for
// questions that differ in any one input, including questions that share a
// slot of the table.
func TestCachedChooseAnswersAsChoose(t *testing.T) {
	m := xferplan.Reference()
	other := xferplan.Reference()
	other.CopyJob *= 50
	reqs := []xferplan.Request{
		{Dir: xferplan.Upload, Copies: 1024, Bytes: 4 << 20, PackedBytes: 4<<20 + 1024*24},
		{Dir: xferplan.Readback, Copies: 1024, Bytes: 4 << 20, PackedBytes: 4<<20 + 1024*24},
		{Dir: xferplan.Upload, Copies: 1, Bytes: 1 << 20, PackedBytes: 1<<20 + 24, Streamable: true},
		{Dir: xferplan.Upload, Copies: 1, Bytes: 1 << 20, PackedBytes: 1<<20 + 24, Streamable: true, Pinned: true},
		{Dir: xferplan.Upload, Copies: 2048, Bytes: 52 << 20, PackedBytes: 52<<20 + 2048*40},
	}
	tunes := []xferplan.Tuning{{}, {MaxWorkers: 2}, {PackParts: 3}, {PackMinCopies: -1}}
	for round := range 2 {
		for _, r := range reqs {
			for _, tu := range tunes {
				for _, mm := range []*xferplan.Model{&m, &other} {
					for _, procs := range []int{1, 16} {
						want := xferplan.Choose(r, tu, mm, procs)
						assert.Equal(t, want, cachedChoose(r, tu, mm, procs), "round %d %+v %+v procs %d", round, r, tu, procs)
					}
				}
			}
		}
	}
	// Many distinct shapes: every answer still matches (slots are shared).
	for n := 1; n <= 3*planSlots; n++ {
		r := xferplan.Request{Dir: xferplan.Upload, Copies: n, Bytes: int64(n) * 4096, PackedBytes: int64(n) * 4200}
		assert.Equal(t, xferplan.Choose(r, xferplan.Tuning{}, &m, 16), cachedChoose(r, xferplan.Tuning{}, &m, 16))
	}
}
