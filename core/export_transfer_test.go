package core

import "time"

// Test hooks for the transfer paths (packed.go, pipeline.go), for package
// core_test.

// TransferTuning mirrors transferTuning with exported fields. A zero field
// keeps its default; a negative PackMinCopies or PipelineMinBytes switches
// that path off.
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
	TaperBytes       int
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
}

// WithTransferTuning sets the thresholds that choose the transfer paths.
func WithTransferTuning(t TransferTuning) Option {
	return func(c *config) {
		c.xfer = transferTuning{packMinCopies: t.PackMinCopies, packMaxMeanBytes: t.PackMaxMeanBytes,
			packMaxBytes: t.PackMaxBytes, pipelineMin: t.PipelineMinBytes, chunk: t.ChunkBytes,
			blocks: t.Blocks, workers: t.Workers, perWorker: t.BytesPerWorker, packParts: t.PackParts, taper: t.TaperBytes,
			packBlock: t.PackBlock, packGrid: t.PackGrid, fenceSpin: t.FenceSpin, syncEach: t.SyncEach,
			linger: t.Linger, pipeLinger: t.PipeLinger}
	}
}

// SetPhaseHook has f called with each packed-transfer phase's name as it
// ends (upload: pin, validate, fuse, staging, pack, lease, dma, launch,
// fence; readback: pin, validate, fuse, staging, table, lease, table-dma,
// launch, dma, fence, unpack) and returns a function that removes it. Not
// safe while transfers run.
func SetPhaseHook(f func(phase string)) (restore func()) {
	old := phaseHook
	phaseHook = f
	return func() { phaseHook = old }
}

// Default thresholds, for tests that size batches around them.
const (
	PackMinCopiesForTest    = packMinCopies
	PipelineMinBytesForTest = pipelineMinBytes
)
