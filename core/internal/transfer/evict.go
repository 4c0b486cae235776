package transfer

import (
	"sync/atomic"
	"time"

	"github.com/vyre-go/vyrecuda/core/internal/copyjob"
	"github.com/vyre-go/vyrecuda/core/internal/hostmem"
	"github.com/vyre-go/vyrecuda/core/internal/spin"
)

// EvictHelpers runs a pinned pool's evictions (hostmem.Helpers) as
// background jobs of the copy helpers (copyjob.Background): helpers take
// their tasks only when no call's copying has one for them, so a next
// readback's own copy out comes first. Its zero value is ready.
type EvictHelpers struct{}

// NewJob returns a background job of n tasks that finish ends.
func (EvictHelpers) NewJob(n int, task func(int), finish func(), linger time.Duration) hostmem.Job {
	j := &evictionJob{}
	j.job.Init(n, linger, false, task, func() {
		finish()
		j.settled.Store(true)
	})
	return j
}

// evictionJob is one eviction on the copy helpers.
type evictionJob struct {
	job     copyjob.Job
	settled atomic.Bool // finish has returned
}

// Start lists j as a background job and wakes up to workers helpers.
func (j *evictionJob) Start(workers int) {
	copyjob.Background(&j.job, min(workers, copyjob.MaxWorkers))
}

// Wait helps with j's remaining tasks and returns once its finish has
// returned: it polls for up to copyjob.WaitSpin, then blocks.
func (j *evictionJob) Wait() {
	j.job.Work()
	var sp spin.Spinner
	var until time.Time
	for !j.settled.Load() {
		if now, ok := sp.Pause(); ok {
			if until.IsZero() {
				until = now.Add(copyjob.WaitSpin)
			} else if now.After(until) {
				<-j.job.Done()
				return
			}
		}
	}
}
