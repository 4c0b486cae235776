package core

import (
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/vyre-go/vyrecuda/accounting"
	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
)

// The Backend's memory is two pools of their own packages: device memory
// (core/internal/devmem, over internal/alloc) and pinned host staging
// (core/internal/hostmem). This file builds the pinned pool over the copy
// helpers and holds the public verbs that reach both.

// Trim gives every cached device block and every cached pinned staging
// block back to the driver now. Memory in use is never touched: live
// resident buffers, and staging or scratch that unfinished or quarantined
// work still holds (that is not in the caches). Afterwards MemoryStats'
// CachedDevice and CachedPinned are 0 and the device holds exactly MemoryStats().Reserved bytes for
// this Backend. A driver failure to free a block leaves that block cached
// (or, for pinned staging without room in its cache, kept and still
// counted in ReservedPinned) and is returned after every other block was
// freed; the next Trim retries it, as it retries pinned staging whose free
// failed after a transfer. Trim on a closed Backend is ErrClosed.
func (b *Backend) Trim() error {
	const op = "Trim"
	if b == nil {
		return newError(op, KindInvalidArgument, "the Backend is nil", "call Trim on a Backend from core.Open")
	}
	if err := b.enter(op); err != nil {
		return err
	}
	defer b.exit()
	derr := b.devPool.Trim(op)
	herr := b.hostPool.Trim(op)
	if derr != nil {
		return derr
	}
	if herr != nil {
		return herr
	}
	return nil
}

// newHostPool returns the pinned host pool of a Backend opened with cfg;
// its evictions run on the copy helpers.
func newHostPool(drv Driver, cfg *config) *hostmem.Pool {
	return hostmem.New(drv, hostmem.Config{Cap: cfg.pinnedPoolCap, Log: cfg.log, Helpers: evictHelpers{},
		SpareWindow: cfg.pinTest.SpareWindow, SpareRetry: cfg.pinTest.SpareRetry, EvictHook: cfg.pinTest.EvictHook})
}

// evictHelpers runs the pinned pool's evictions as background jobs of
// copyHelpers (pipeline.go): helpers take their tasks only when no call's
// copying has one for them, so a next readback's own copy out comes first.
type evictHelpers struct{}

// NewJob returns a background job of n tasks that finish ends.
func (evictHelpers) NewJob(n int, task func(int), finish func(), linger time.Duration) hostmem.Job {
	j := &evictionJob{}
	j.job = taskJob{f: task, n: int64(n), linger: linger, done: make(chan struct{}), finish: func() {
		finish()
		j.settled.Store(true)
	}}
	j.job.left.Store(int64(n))
	return j
}

// evictionJob is one eviction on the copy helpers.
type evictionJob struct {
	job     taskJob
	settled atomic.Bool // finish has returned
}

// Start lists j as a background job and wakes up to workers helpers.
func (j *evictionJob) Start(workers int) {
	copyHelpers.addBackground(&j.job, min(workers, maxCopyWorkers))
}

// Wait helps with j's remaining tasks and returns once its finish has
// returned: it polls for up to waitSpin, then blocks.
func (j *evictionJob) Wait() {
	j.job.work()
	var sp spinner
	var until time.Time
	for !j.settled.Load() {
		if now, ok := sp.pause(); ok {
			if until.IsZero() {
				until = now.Add(waitSpin)
			} else if now.After(until) {
				<-j.job.done
				return
			}
		}
	}
}

// orDiscard returns log, or a logger that drops everything when log is nil.
func orDiscard(log *slog.Logger) *slog.Logger {
	if log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return log
}

// subOrRepair subtracts n from c; when that would underflow the accounting is
// already wrong, so c is repaired to zero and the event logged as an error,
// where the reference repairs instead of failing the caller.
func subOrRepair(c *accounting.Counter, n uint64, log *slog.Logger, what string) {
	if c.SubOrRepair(n) {
		log.Error(what+" underflowed; repaired accounting to zero", "subtracted", n)
	}
}
