//go:build gpu

// Deadlines of NCCL joins and collectives on real devices. Run:
//
//	.gpu/core.test -test.run 'GPUNCCLJoinCommContext|GPUMultiDeviceCommContext|GPUNCCLCollectiveContext' -test.v

package core_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
)

// TestGPUNCCLJoinCommContextRankThatNeverStarts: a two-rank join whose
// second rank never starts returns at its deadline. NCCL's blocking
// ncclCommInitRank goes on in a goroutine that the test binary leaves
// behind; the Backend stays open for it (closing it would release the
// context under NCCL's initialization).
func TestGPUNCCLJoinCommContextRankThatNeverStarts(t *testing.T) {
	b, err := core.OpenCUDA(0)
	require.NoError(t, err)
	id, err := b.NewCommID()
	skipWithoutNCCL(t, err)
	require.NoError(t, err)
	var c *core.Comm
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		c, err = b.JoinCommContext(ctx, id, 2, 0)
	}()
	waitRanks(t, &wg, "a join whose other rank never starts")
	assert.Nil(t, c)
	requireErrKind(t, err, core.ErrInFlight, "stopped waiting for the other ranks to join")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

// TestGPUNCCLCollectiveContextOneRank: a one-rank communicator joined and
// all-reduced with a live context (the wait polls the stream) gives back
// its input, as the blocking form does.
func TestGPUNCCLCollectiveContextOneRank(t *testing.T) {
	b, err := core.OpenCUDA(0)
	require.NoError(t, err)
	defer func() { assert.NoError(t, b.Close()) }()
	id, err := b.NewCommID()
	skipWithoutNCCL(t, err)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := b.JoinCommContext(ctx, id, 1, 0)
	require.NoError(t, err)
	in := f32s(1<<20, 3)
	h := putBytes(t, b, in)
	out := putBytes(t, b, make([]byte, len(in)))
	require.NoError(t, c.AllReduceContext(ctx, h, out, core.DataFloat32, core.ReduceSum))
	require.True(t, bytesEqual(in, getBytes(t, b, out)), "one-rank all-reduce is the identity")
	require.NoError(t, c.Close())
	require.NoError(t, b.Free(h))
	require.NoError(t, b.Free(out))
}

// TestGPUMultiDeviceCommContextDeadline: two ranks joined from two
// goroutines; rank 0 all-reduces with a deadline while rank 1 does not take
// part. Rank 0's deadline aborts its communicator (ncclCommAbort) and it
// returns ErrInFlight wrapping context.DeadlineExceeded with nothing in
// flight. Rank 1 then calls with a deadline of its own and returns too:
// an abort on one rank does not reach another rank's kernel on NCCL, so
// each rank needs its own deadline.
func TestGPUMultiDeviceCommContextDeadline(t *testing.T) {
	g := openAllGPUs(t, 2)
	bs := g.Backends()[:2]
	id, err := bs[0].NewCommID()
	skipWithoutNCCL(t, err)
	require.NoError(t, err)
	comms := make([]*core.Comm, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r, b := range bs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = b.JoinComm(id, 2, r)
		}()
	}
	waitRanks(t, &wg, "the joins")
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	bufs := []core.Buffer{putBytes(t, bs[0], f32s(1<<16, 1)), putBytes(t, bs[1], f32s(1<<16, 2))}
	// One all-reduce on both ranks first: NCCL connects a communicator's
	// ranks at its first collective (NCCL_RUNTIME_CONNECT), inside the
	// host call, where no context reaches.
	for r := range bs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = comms[r].AllReduce(bufs[r], bufs[r], core.DataFloat32, core.ReduceSum)
		}()
	}
	waitRanks(t, &wg, "the first all-reduce")
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	for r := range bs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			if r == 1 {
				time.Sleep(time.Second) // rank 0 has given up by now
			}
			errs[r] = comms[r].AllReduceContext(ctx, bufs[r], bufs[r], core.DataFloat32, core.ReduceSum)
		}()
		if r == 0 {
			waitRanks(t, &wg, "rank 0's all-reduce")
		}
	}
	waitRanks(t, &wg, "rank 1's all-reduce")
	requireErrKind(t, errs[0], core.ErrInFlight, "aborted")
	assert.ErrorIs(t, errs[0], context.DeadlineExceeded)
	require.Error(t, errs[1], "rank 1's partner aborted")
	for r, c := range comms {
		require.NoError(t, c.Close())
		require.NoError(t, bs[r].Free(bufs[r]), "rank %d: nothing in flight", r)
	}
}
