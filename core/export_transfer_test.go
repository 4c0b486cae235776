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
}

// WithTransferTuning sets the thresholds that choose the transfer paths.
func WithTransferTuning(t TransferTuning) Option {
	return func(c *config) {
		c.xfer = transferTuning{packMinCopies: t.PackMinCopies, packMaxMeanBytes: t.PackMaxMeanBytes,
			packMaxBytes: t.PackMaxBytes, pipelineMin: t.PipelineMinBytes, chunk: t.ChunkBytes,
			blocks: t.Blocks, workers: t.Workers, perWorker: t.BytesPerWorker, packParts: t.PackParts, taper: t.TaperBytes}
	}
}

// SetCopyHelperSpin sets how long copy helpers poll for work after a job
// and returns a function that restores the previous value.
func SetCopyHelperSpin(d time.Duration) (restore func()) {
	old := copyHelpers.spin.Swap(int64(d))
	return func() { copyHelpers.spin.Store(old) }
}

// Default thresholds, for tests that size batches around them.
const (
	PackMinCopiesForTest    = packMinCopies
	PipelineMinBytesForTest = pipelineMinBytes
)
