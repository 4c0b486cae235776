package core

import (
	"time"

	"github.com/vyre-go/vyrecuda/core/internal/spin"
	"github.com/vyre-go/vyrecuda/core/internal/transfer"
	"github.com/vyre-go/vyrecuda/xferplan"
)

// Test hooks for the transfer paths (core/internal/transfer), for package
// core_test.

// TransferTuning narrows the planner (xferplan) for tests. A zero field
// keeps its default; a negative PackMinCopies or PipelineMinBytes rules that
// plan out. Setting PackMinCopies or PipelineMinBytes above zero makes the
// planner take the packed or staged plan whenever one applies, whatever the
// model says, so toy sizes run them; ChunkBytes fixes the staged chunk;
// BytesPerWorker makes every copy of at least two such shares run on
// several goroutines.
type TransferTuning struct {
	PackMinCopies    int
	PackMaxMeanBytes int
	PackMaxBytes     int
	PipelineMinBytes int
	ChunkBytes       int
	Blocks           int
	Workers          int
	BytesPerWorker   int
	PackParts        int
	// Only restricts the plans outright (see xferplan.Tuning.Only).
	Only xferplan.KindSet
	// PackBlock and PackGrid set the scatter/gather launch geometry.
	PackBlock int
	PackGrid  int
	// FenceSpin is how long a packed call polls StreamQuery before it
	// blocks; negative: not at all.
	FenceSpin time.Duration
	// SyncEach fences after every queued packed operation, so phase times
	// hold each operation's device time.
	SyncEach bool
	// Linger is how long copy helpers poll for a next job after a packed
	// or staged call's copy job, PipeLinger after a pipeline chunk's;
	// negative: they park at once.
	Linger, PipeLinger time.Duration
	// Prewake is how long helpers woken at the start of a many-item call
	// poll for its copy job; negative: none are woken ahead.
	Prewake time.Duration
	// PlainPack packs uploads with the built-in copy instead of
	// non-temporal stores.
	PlainPack bool
	// PlainUnpack unpacks readbacks with the built-in copy, never with
	// non-temporal stores.
	PlainUnpack bool
	// InlineEvict evicts readback staging inside the unpack, before the
	// call returns, instead of after it.
	InlineEvict bool
}

// toyModel is the reference model with free copy jobs, so the planner
// spreads even toy copies over every worker the tuning allows.
var toyModel = func() xferplan.Model {
	m := xferplan.Reference()
	m.CopyJob = 0
	return m
}()

// WithTransferTuning narrows the planner as t says.
func WithTransferTuning(t TransferTuning) Option {
	return func(c *config) {
		pt := xferplan.Tuning{PackMinCopies: t.PackMinCopies, PackMaxMean: int64(t.PackMaxMeanBytes),
			PackMaxBytes: int64(t.PackMaxBytes), StageMin: int64(t.PipelineMinBytes),
			MinChunk: int64(t.ChunkBytes), MaxChunk: int64(t.ChunkBytes), Blocks: t.Blocks,
			MaxWorkers: t.Workers, WorkerBytes: int64(t.BytesPerWorker), PackParts: t.PackParts, Only: t.Only}
		if pt.Only == 0 && (t.PackMinCopies > 0 || t.PipelineMinBytes > 0) {
			pt.Only = xferplan.Kinds(xferplan.Packed, xferplan.Staged, xferplan.Direct)
		}
		var m *xferplan.Model
		if t.BytesPerWorker > 0 {
			m = &toyModel
		}
		c.xfer = transfer.Tuning{Plan: pt, Model: m, PackBlock: t.PackBlock, PackGrid: t.PackGrid,
			FenceSpin: t.FenceSpin, SyncEach: t.SyncEach, Linger: t.Linger, PipeLinger: t.PipeLinger, Prewake: t.Prewake,
			PlainPack: t.PlainPack, PlainUnpack: t.PlainUnpack, InlineEvict: t.InlineEvict}
	}
}

// WithInlineStagedEviction has staged single readbacks evict their staging
// in their copy out even when their bucket holds a second set (by default
// those of up to 2 MiB then leave it to the copy helpers after the call),
// and never pin a second set. It combines with the other options.
func WithInlineStagedEviction() Option {
	return func(c *config) { c.xfer.InlineStaged = true }
}

// WithInlinePartsEviction has packed readbacks in parts evict their
// staging in their copy-out even when their staging buckets hold a second
// set (by default they then leave it to the copy helpers after the call).
// It combines with the other options.
func WithInlinePartsEviction() Option {
	return func(c *config) { c.xfer.InlineParts = true }
}

// WithTableDMA has packed readbacks copy their table to the device with a
// DMA of its own even where the gather kernel could read it from pinned
// host memory. It combines with the other options.
func WithTableDMA() Option {
	return func(c *config) { c.xfer.TableDMA = true }
}

// SetPhaseHook has f called with each packed-transfer phase's name as it
// ends (upload: pin, validate, fuse, staging, pack, dma, launch, fence;
// readback: pin, validate, fuse, plan, table, lease, table-dma, launch,
// staging, dma, fence, unpack) and returns a function that removes it. Not safe
// while transfers run.
func SetPhaseHook(f func(phase string)) (restore func()) { return transfer.SetPhaseHook(f) }

// PackMinCopiesForTest is the planner's default bound, for tests that size
// batches around it.
var PackMinCopiesForTest = xferplan.DefaultTuning(1).PackMinCopies

// SetSpinHint turns the polling loops' spin-wait hint on or off and
// returns a function that restores it. Not safe while transfers run.
func SetSpinHint(on bool) (restore func()) {
	old := spin.UseHint
	spin.UseHint = on
	return func() { spin.UseHint = old }
}

// WithEvictHookForTest has f called with each part of a readback's staging
// just before a background eviction evicts it (evictions then run even
// where the processor cannot evict). It combines with the other options.
func WithEvictHookForTest(f func(part []byte)) Option {
	return func(c *config) { c.pinTest.EvictHook = f }
}

// WithSpareWindowForTest sets how close staged readbacks must follow each
// other for a second set of staging. It combines with the other options.
func WithSpareWindowForTest(d time.Duration) Option {
	return func(c *config) { c.pinTest.SpareWindow = d }
}

// WithSpareRetryForTest sets how long a failed spare allocation holds off
// the next one of its bucket. It combines with the other options.
func WithSpareRetryForTest(d time.Duration) Option {
	return func(c *config) { c.pinTest.SpareRetry = d }
}
