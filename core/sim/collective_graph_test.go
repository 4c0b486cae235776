package sim

import (
	"encoding/binary"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

func i32s(v ...int32) []byte {
	out := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(out[4*i:], uint32(x))
	}
	return out
}

// captureAllReduce records rank r's in-place all-reduce of n int32 at buf
// on a stream of its device and returns the executable graph and a stream
// to launch it on.
func captureAllReduce(t *testing.T, d *Device, c driver.Communicator, buf uint64, n uint64) (driver.GraphExec, driver.Stream) {
	t.Helper()
	s := mustStream(t, d)
	require.NoError(t, d.StreamBeginCapture(s))
	require.NoError(t, c.AllReduce(buf, buf, n, driver.DataInt32, driver.ReduceSum, s))
	g, err := d.StreamEndCapture(s)
	require.NoError(t, err)
	x, err := d.GraphInstantiate(g)
	require.NoError(t, err)
	require.NoError(t, d.GraphDestroy(g))
	return x, s
}

// TestCapturedCollectiveRunsAtEveryLaunch: a collective recorded by a
// stream capture queues nothing and matches nothing while it is recorded;
// each launch of the graph is a new call of the communicator, meeting the
// other ranks' next calls (here a launch of their own graph on one rank and
// an eager call on the other), and reading the memory as it is then.
func TestCapturedCollectiveRunsAtEveryLaunch(t *testing.T) {
	m := newMachine(t, 2, nil)
	id, err := m.Device(0).NewCommID()
	require.NoError(t, err)
	comms := joinAll(t, m, id)
	bufs := make([]uint64, 2)
	for r := range bufs {
		bufs[r] = mustAlloc(t, m.Device(r), 8)
		require.NoError(t, m.Device(r).WriteDevice(bufs[r], i32s(int32(r+1), int32(10*(r+1)))))
	}
	x0, s0 := captureAllReduce(t, m.Device(0), comms[0], bufs[0], 2)
	assert.Zero(t, m.Device(0).Live().QueuedOps, "recording queues nothing")
	x1, s1 := captureAllReduce(t, m.Device(1), comms[1], bufs[1], 2)
	for launch := 1; launch <= 2; launch++ {
		var wg sync.WaitGroup
		for r, x := range []driver.GraphExec{x0, x1} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s := [2]driver.Stream{s0, s1}[r]
				assert.NoError(t, m.Device(r).GraphLaunch(x, s))
				assert.NoError(t, m.Device(r).StreamSynchronize(s))
			}()
		}
		waitDone(t, &wg, "the ranks' graph launches")
		want := [][]byte{i32s(3, 30), i32s(6, 60)}[launch-1] // each launch sums what the last one left
		for r := range bufs {
			got, _ := m.Device(r).ReadDevice(bufs[r], 8)
			assert.Equal(t, want, got, "launch %d rank %d", launch, r)
		}
	}
	// A launch meets an eager call of the other rank just as well.
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		assert.NoError(t, m.Device(0).GraphLaunch(x0, s0))
		assert.NoError(t, m.Device(0).StreamSynchronize(s0))
	}()
	go func() {
		defer wg.Done()
		assert.NoError(t, comms[1].AllReduce(bufs[1], bufs[1], 2, driver.DataInt32, driver.ReduceSum, s1))
		assert.NoError(t, m.Device(1).StreamSynchronize(s1))
	}()
	waitDone(t, &wg, "a launch beside an eager call")
	got, _ := m.Device(0).ReadDevice(bufs[0], 8)
	assert.Equal(t, i32s(12, 120), got)

	// After an abort a launch queues a part that fails when it executes;
	// the launch itself is accepted, as the graph is.
	require.NoError(t, comms[1].Abort())
	require.NoError(t, m.Device(0).GraphLaunch(x0, s0))
	requireCode(t, cudaapi.CUDA_ERROR_ILLEGAL_STATE, m.Device(0).StreamSynchronize(s0))
	require.NoError(t, comms[0].Abort())
	require.NoError(t, m.Device(0).GraphLaunch(x0, s0))
	requireCode(t, cudaapi.CUDA_ERROR_INVALID_HANDLE, m.Device(0).StreamSynchronize(s0))
	got, _ = m.Device(0).ReadDevice(bufs[0], 8)
	assert.Equal(t, i32s(12, 120), got, "nothing written after the abort")
	for r, x := range []driver.GraphExec{x0, x1} {
		require.NoError(t, m.Device(r).GraphExecDestroy(x))
		require.NoError(t, m.Device(r).StreamDestroy([2]driver.Stream{s0, s1}[r]))
		require.NoError(t, m.Device(r).MemFree(bufs[r]))
	}
	RequireMachineNoLeaks(t, m)
}
