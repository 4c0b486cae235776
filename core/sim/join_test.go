package sim

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// waitDone fails the test when wg's goroutines take longer than 30 s: they
// would otherwise hang the test binary.
func waitDone(t *testing.T, wg *sync.WaitGroup, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not return within 30 s", what)
	}
}

// joinAll joins every device of m as its rank of id, one goroutine each.
func joinAll(t *testing.T, m *Machine, id driver.CommID) []driver.Communicator {
	t.Helper()
	comms := make([]driver.Communicator, m.Len())
	var wg sync.WaitGroup
	for r := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := m.Device(r).JoinCommunicator(id, m.Len(), r)
			assert.NoError(t, err)
			comms[r] = c
		}()
	}
	waitDone(t, &wg, "the joins")
	return comms
}

// TestJoinCommunicatorContextLeavesWhenTheContextIsDone: a rank whose
// context ends before the others join leaves as if it had never joined
// (no communicator lives on its device), and can join again with the same
// id; a join already complete succeeds even with a done context.
func TestJoinCommunicatorContextLeavesWhenTheContextIsDone(t *testing.T) {
	m := newMachine(t, 2, nil)
	d0 := m.Device(0)
	id, err := d0.NewCommID()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := d0.JoinCommunicatorContext(ctx, id, 2, 0)
		assert.Nil(t, c)
		assert.True(t, errors.Is(err, context.DeadlineExceeded), "got %v", err)
		assert.ErrorContains(t, err, "rank 0 stopped waiting with 1 of 2 ranks joined")
	}()
	waitDone(t, &wg, "a join whose deadline passed")
	assert.Zero(t, d0.Live().Communicators, "the rank left")

	comms := joinAll(t, m, id)
	b := [2]uint64{mustAlloc(t, d0, 4), mustAlloc(t, m.Device(1), 4)}
	for r, c := range comms {
		require.NotNil(t, c, "rank %d", r)
		d := m.Device(r)
		require.NoError(t, d.WriteDevice(b[r], []byte{byte(r + 1), 0, 0, 0}))
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := mustStream(t, d)
			assert.NoError(t, c.AllReduce(b[r], b[r], 1, driver.DataInt32, driver.ReduceSum, s))
			assert.NoError(t, d.StreamSynchronize(s))
		}()
	}
	waitDone(t, &wg, "the all-reduce after rejoining")
	for r := range comms {
		got, err := m.Device(r).ReadDevice(b[r], 4)
		require.NoError(t, err)
		assert.Equal(t, []byte{3, 0, 0, 0}, got, "rank %d", r)
		require.NoError(t, comms[r].Destroy())
	}

	// One rank: the join completes at once, whatever the context says.
	id, err = d0.NewCommID()
	require.NoError(t, err)
	done, stop := context.WithCancel(context.Background())
	stop()
	c, err := d0.JoinCommunicatorContext(done, id, 1, 0)
	require.NoError(t, err)
	require.NoError(t, c.Destroy())
}

// TestStreamQueryNeverWaitsForAMissingRank: a query of a stream whose
// collective part waits for a rank that has not queued its part reports it
// unfinished and leaves it queued; once the rank queues its part, the
// query executes both. An abort instead lets the part finish as a no-op.
func TestStreamQueryNeverWaitsForAMissingRank(t *testing.T) {
	m := newMachine(t, 2, nil)
	id, err := m.Device(0).NewCommID()
	require.NoError(t, err)
	comms := joinAll(t, m, id)
	var b [2]uint64
	var s [2]driver.Stream
	for r := range b {
		d := m.Device(r)
		b[r], s[r] = mustAlloc(t, d, 4), mustStream(t, d)
		require.NoError(t, d.WriteDevice(b[r], []byte{byte(10 * (r + 1)), 0, 0, 0}))
	}
	d0, d1 := m.Device(0), m.Device(1)
	ev := mustEvent(t, d0, false)
	require.NoError(t, comms[0].AllReduce(b[0], b[0], 1, driver.DataInt32, driver.ReduceSum, s[0]))
	require.NoError(t, d0.EventRecord(ev, s[0]))
	for range 3 {
		done, err := d0.StreamQuery(s[0])
		require.NoError(t, err)
		assert.False(t, done, "rank 1 has not queued its part")
		done, err = d0.EventQuery(ev)
		require.NoError(t, err)
		assert.False(t, done)
	}
	require.NoError(t, comms[1].AllReduce(b[1], b[1], 1, driver.DataInt32, driver.ReduceSum, s[1]))
	done, err := d0.StreamQuery(s[0])
	require.NoError(t, err)
	assert.True(t, done)
	for r := range b {
		got, err := m.Device(r).ReadDevice(b[r], 4)
		require.NoError(t, err)
		assert.Equal(t, []byte{30, 0, 0, 0}, got, "rank %d", r)
	}
	require.NoError(t, d1.StreamSynchronize(s[1]))

	// Rank 0 queues again and gives up: its abort lets the part finish.
	require.NoError(t, comms[0].AllReduce(b[0], b[0], 1, driver.DataInt32, driver.ReduceSum, s[0]))
	done, err = d0.StreamQuery(s[0])
	require.NoError(t, err)
	assert.False(t, done)
	require.NoError(t, comms[0].Abort())
	done, err = d0.StreamQuery(s[0])
	require.NoError(t, err)
	assert.True(t, done, "the aborted rank's part is abandoned")
	requireCode(t, cudaapi.CUDA_ERROR_ILLEGAL_STATE, comms[1].AllReduce(b[1], b[1], 1, driver.DataInt32, driver.ReduceSum, s[1]))
	require.NoError(t, comms[1].Destroy())
	assert.Zero(t, d0.Live().Communicators+d1.Live().Communicators)
}

// TestStreamQueryKeepsAWaitOnAMissingRankQueued: a stream that waits on
// an event recorded after a collective part whose partner has not queued
// yet stays unfinished to queries, and its later work does not run before
// the part; once the partner queues, the query runs everything in order.
func TestStreamQueryKeepsAWaitOnAMissingRankQueued(t *testing.T) {
	m := newMachine(t, 2, nil)
	id, err := m.Device(0).NewCommID()
	require.NoError(t, err)
	comms := joinAll(t, m, id)
	d0, d1 := m.Device(0), m.Device(1)
	b0, b1 := mustAlloc(t, d0, 4), mustAlloc(t, d1, 4)
	require.NoError(t, d0.WriteDevice(b0, []byte{1, 0, 0, 0}))
	require.NoError(t, d1.WriteDevice(b1, []byte{2, 0, 0, 0}))
	coll, after, s1 := mustStream(t, d0), mustStream(t, d0), mustStream(t, d1)
	ev := mustEvent(t, d0, false)
	require.NoError(t, comms[0].AllReduce(b0, b0, 1, driver.DataInt32, driver.ReduceSum, coll))
	require.NoError(t, d0.EventRecord(ev, coll))
	require.NoError(t, d0.StreamWaitEvent(after, ev))
	require.NoError(t, d0.MemsetD8Async(b0, 9, 1, after)) // must land after the all-reduce
	done, err := d0.StreamQuery(after)
	require.NoError(t, err)
	assert.False(t, done, "the wait is behind a part whose partner is missing")
	got, err := d0.ReadDevice(b0, 4)
	require.NoError(t, err)
	assert.Equal(t, []byte{1, 0, 0, 0}, got, "nothing ran out of order")

	require.NoError(t, comms[1].AllReduce(b1, b1, 1, driver.DataInt32, driver.ReduceSum, s1))
	done, err = d0.StreamQuery(after)
	require.NoError(t, err)
	assert.True(t, done)
	got, err = d0.ReadDevice(b0, 4)
	require.NoError(t, err)
	assert.Equal(t, []byte{9, 0, 0, 0}, got, "the memset ran after the all-reduce (3)")
	require.NoError(t, d1.StreamSynchronize(s1))
	for _, c := range comms {
		require.NoError(t, c.Destroy())
	}
}

// TestHoldQueriesReportsQueuedWorkUnfinished: while HoldQueries is on,
// queries execute nothing and report queued work unfinished (a stream with
// nothing queued is done); a synchronization still executes it.
func TestHoldQueriesReportsQueuedWorkUnfinished(t *testing.T) {
	d := New(Config{})
	s := mustStream(t, d)
	ev := mustEvent(t, d, false)
	p := mustAlloc(t, d, 16)
	d.HoldQueries(true)
	done, err := d.StreamQuery(s)
	require.NoError(t, err)
	assert.True(t, done, "nothing queued")
	require.NoError(t, d.MemsetD8Async(p, 7, 16, s))
	require.NoError(t, d.EventRecord(ev, s))
	for range 3 {
		done, err = d.StreamQuery(s)
		require.NoError(t, err)
		assert.False(t, done)
		done, err = d.EventQuery(ev)
		require.NoError(t, err)
		assert.False(t, done)
	}
	got, err := d.ReadDevice(p, 16)
	require.NoError(t, err)
	assert.NotEqual(t, fill(16, 7), got, "the memset has not run")
	require.NoError(t, d.StreamSynchronize(s))
	got, err = d.ReadDevice(p, 16)
	require.NoError(t, err)
	assert.Equal(t, fill(16, 7), got)
	d.HoldQueries(false)
	require.NoError(t, d.MemsetD8Async(p, 9, 16, s))
	done, err = d.EventQuery(ev)
	require.NoError(t, err)
	assert.True(t, done, "the event's record ran before the new work")
	done, err = d.StreamQuery(s)
	require.NoError(t, err)
	assert.True(t, done)
}
