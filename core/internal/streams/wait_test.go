package streams_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/streams"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// queryDriver reports its stream unfinished to the first busy queries (all
// of them when busy is negative), then done or err; it counts queries and
// synchronizations.
type queryDriver struct {
	driver.Driver
	busy           int64
	err            error
	queries, syncs atomic.Int64
}

func (q *queryDriver) StreamQuery(driver.Stream) (bool, error) {
	n := q.queries.Add(1)
	if q.busy < 0 || n <= q.busy {
		return false, nil
	}
	return q.err == nil, q.err
}

func (q *queryDriver) StreamSynchronize(driver.Stream) error {
	q.syncs.Add(1)
	return q.err
}

func TestWaitWithoutAContextSynchronizesOnce(t *testing.T) {
	for _, ctx := range []context.Context{nil, context.Background()} {
		q := &queryDriver{busy: -1}
		require.NoError(t, streams.Wait(ctx, q, 1))
		assert.Equal(t, int64(1), q.syncs.Load())
		assert.Zero(t, q.queries.Load())
	}
	q := &queryDriver{err: cudaapi.CUDA_ERROR_LAUNCH_FAILED}
	assert.ErrorIs(t, streams.Wait(context.TODO(), q, 1), cudaapi.CUDA_ERROR_LAUNCH_FAILED)
}

func TestWaitPollsUntilTheStreamIsDone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := &queryDriver{busy: 200} // past the back-to-back queries, into the sleeps
	require.NoError(t, streams.Wait(ctx, q, 1))
	assert.Equal(t, int64(201), q.queries.Load())
	assert.Zero(t, q.syncs.Load())

	q = &queryDriver{busy: 3, err: cudaapi.CUDA_ERROR_LAUNCH_FAILED}
	assert.ErrorIs(t, streams.Wait(ctx, q, 1), cudaapi.CUDA_ERROR_LAUNCH_FAILED)
}

func TestWaitStopsWhenTheContextIsDone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	q := &queryDriver{busy: -1}
	require.ErrorIs(t, streams.Wait(ctx, q, 1), context.DeadlineExceeded)
	assert.Greater(t, q.queries.Load(), int64(1), "it polled until the deadline")
	assert.Zero(t, q.syncs.Load(), "the work stays queued")

	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	q = &queryDriver{busy: 0}
	assert.NoError(t, streams.Wait(cctx, q, 1), "work already done is reported done")
	q = &queryDriver{busy: -1}
	assert.ErrorIs(t, streams.Wait(cctx, q, 1), context.Canceled)
	assert.Equal(t, int64(1), q.queries.Load())
}
