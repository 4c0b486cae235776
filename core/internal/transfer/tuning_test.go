package transfer

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/vyre-go/vyrecuda/core/internal/copyjob"
	"github.com/vyre-go/vyrecuda/xferplan"
)

// WithDefaults fills every zero field, keeps every set one (negative
// durations included: they turn a mechanism off), and bounds the
// planner's workers by what a copy job can use.
func TestWithDefaultsFillsOnlyZeroFields(t *testing.T) {
	d := Tuning{}.WithDefaults()
	assert.Same(t, &referenceModel, d.Model)
	assert.Equal(t, PackBlockThreads, d.PackBlock)
	assert.Equal(t, packMaxGrid, d.PackGrid)
	assert.Equal(t, time.Duration(packFenceSpin), d.FenceSpin)
	assert.Equal(t, copyjob.DefaultLinger, d.Linger)
	assert.Equal(t, copyjob.DefaultLinger, d.PipeLinger)
	assert.Equal(t, defaultPrewake, d.Prewake)
	assert.Zero(t, d.Plan.MaxWorkers, "zero: the planner's own default")

	m := xferplan.Reference()
	set := Tuning{Model: &m, PackBlock: 128, PackGrid: 7, FenceSpin: time.Millisecond, Linger: -1, PipeLinger: 3,
		Prewake: -1, Plan: xferplan.Tuning{MaxWorkers: 99}}.WithDefaults()
	assert.Same(t, &m, set.Model)
	assert.Equal(t, 128, set.PackBlock)
	assert.Equal(t, 7, set.PackGrid)
	assert.Equal(t, time.Millisecond, set.FenceSpin)
	assert.Equal(t, time.Duration(-1), set.Linger)
	assert.Equal(t, time.Duration(3), set.PipeLinger)
	assert.Equal(t, time.Duration(-1), set.Prewake)
	assert.Equal(t, copyjob.MaxWorkers, set.Plan.MaxWorkers)
	assert.Zero(t, Tuning{Plan: xferplan.Tuning{MaxWorkers: -4}}.WithDefaults().Plan.MaxWorkers)
}

// Choose plans with the memo and never hands out fewer than one worker or
// more than a copy job can use.
func TestChooseBoundsWorkers(t *testing.T) {
	tu := Tuning{}.WithDefaults()
	for _, r := range []xferplan.Request{
		{Dir: xferplan.Upload, Copies: 1, Bytes: 16},
		{Dir: xferplan.Readback, Copies: 1024, Bytes: 4 << 20, PackedBytes: PackedBound(1024, 4<<20)},
		{Dir: xferplan.Upload, Copies: 1, Bytes: 256 << 20, Streamable: true},
	} {
		p := tu.Choose(r)
		assert.GreaterOrEqual(t, p.Workers, 1, "%+v", r)
		assert.LessOrEqual(t, p.Workers, copyjob.MaxWorkers, "%+v", r)
	}
}

// PackedBound refuses what would not fit an int, and bounds the layout of
// one piece of every size at the edges.
func TestPackedBoundEdges(t *testing.T) {
	assert.Zero(t, PackedBound(-1, 0))
	assert.Zero(t, PackedBound(1, math.MaxInt64))
	assert.Zero(t, PackedBound(math.MaxInt, 1<<40))
	for _, n := range []int{0, 1, 15, 16, 17, packEntryBytes, packEntryBytes + 1} {
		lay := NewLayout(1, func(int) int { return n })
		assert.LessOrEqual(t, int64(lay.Total), PackedBound(1, uint64(n)), "%d bytes", n)
	}
}
