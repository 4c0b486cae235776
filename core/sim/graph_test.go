package sim

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

func TestGraphReplayReadsHostBytesOfEachLaunch(t *testing.T) {
	d := New(Config{})
	ptr := mustAlloc(t, d, 4)
	in, out := mustPinned(t, d, 4), mustPinned(t, d, 4)
	s, run := mustStream(t, d), mustStream(t, d)
	require.NoError(t, d.StreamBeginCapture(s))
	require.NoError(t, d.MemcpyHtoDAsync(ptr, in, s))
	require.NoError(t, d.MemcpyDtoHAsync(out, ptr, s))
	require.Zero(t, d.Live().QueuedOps, "captured work is recorded, not queued")
	g, err := d.StreamEndCapture(s)
	require.NoError(t, err)
	x, err := d.GraphInstantiate(g)
	require.NoError(t, err)
	require.NoError(t, d.GraphDestroy(g), "the executable graph outlives its graph")
	for i := byte(1); i <= 3; i++ {
		copy(in, []byte{i, i, i, i})
		require.NoError(t, d.GraphLaunch(x, run))
		require.Equal(t, 2, d.Live().QueuedOps)
		require.NotEqual(t, in, out, "lazy until synchronized")
		require.NoError(t, d.StreamSynchronize(run))
		require.Equal(t, in, out)
	}
	require.Equal(t, Live{Allocations: 1, DeviceBytes: 4, PinnedBuffers: 2, PinnedBytes: 8, Streams: 2, GraphExecs: 1}, d.Live())
	require.NoError(t, d.GraphExecDestroy(x))
	requireCode(t, cudaapi.CUDA_ERROR_INVALID_HANDLE, d.GraphLaunch(x, run))
	requireCode(t, cudaapi.CUDA_ERROR_INVALID_HANDLE, d.GraphExecDestroy(x))
	requireCode(t, cudaapi.CUDA_ERROR_INVALID_HANDLE, d.GraphDestroy(g))
	_, err = d.GraphInstantiate(g)
	requireCode(t, cudaapi.CUDA_ERROR_INVALID_HANDLE, err)
}

func TestGraphReplayAfterStagingFreedFails(t *testing.T) {
	d := New(Config{})
	ptr := mustAlloc(t, d, 4)
	in := mustPinned(t, d, 4)
	s := mustStream(t, d)
	require.NoError(t, d.StreamBeginCapture(s))
	require.NoError(t, d.MemcpyHtoDAsync(ptr, in, s))
	g, err := d.StreamEndCapture(s)
	require.NoError(t, err)
	x, err := d.GraphInstantiate(g)
	require.NoError(t, err)
	require.NoError(t, d.HostFree(ptrOf(in)))
	require.NoError(t, d.GraphLaunch(x, s))
	requireCode(t, cudaapi.CUDA_ERROR_ILLEGAL_ADDRESS, d.StreamSynchronize(s))
}

func TestCaptureRefusesWaitingOnCapturedWork(t *testing.T) {
	d := New(Config{})
	ptr := mustAlloc(t, d, 4)
	s, other := mustStream(t, d), mustStream(t, d)
	e := mustEvent(t, d, false)
	waits := map[string]func() error{
		"StreamSynchronize": func() error { return d.StreamSynchronize(s) },
		"StreamQuery":       func() error { _, err := d.StreamQuery(s); return err },
		"StreamWaitEvent":   func() error { return d.StreamWaitEvent(s, e) },
		"EventQuery": func() error {
			require.NoError(t, d.EventRecord(e, s))
			_, err := d.EventQuery(e)
			return err
		},
		"EventSynchronize": func() error {
			require.NoError(t, d.EventRecord(e, s))
			return d.EventSynchronize(e)
		},
		"wait on a captured event": func() error {
			require.NoError(t, d.EventRecord(e, s))
			return d.StreamWaitEvent(other, e)
		},
	}
	for name, wait := range waits {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, d.StreamBeginCapture(s))
			requireCode(t, cudaapi.CUDA_ERROR_ILLEGAL_STATE, d.StreamBeginCapture(s))
			require.NoError(t, d.MemsetD8Async(ptr, 1, 4, s))
			requireCode(t, cudaapi.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, wait())
			g, err := d.StreamEndCapture(s)
			requireCode(t, cudaapi.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, err)
			require.Zero(t, g)
			_, err = d.StreamEndCapture(s)
			requireCode(t, cudaapi.CUDA_ERROR_ILLEGAL_STATE, err) // the capture ended
			require.NoError(t, d.EventRecord(e, other), "recorded outside a capture, it can be waited for again")
			require.NoError(t, d.EventSynchronize(e))
		})
	}
	require.Zero(t, d.Live().Graphs)
}

func TestCaptureMisuse(t *testing.T) {
	d := New(Config{})
	s, other := mustStream(t, d), mustStream(t, d)
	_, err := d.StreamEndCapture(s)
	requireCode(t, cudaapi.CUDA_ERROR_ILLEGAL_STATE, err)
	requireCode(t, cudaapi.CUDA_ERROR_INVALID_HANDLE, d.StreamBeginCapture(0))
	require.NoError(t, d.StreamBeginCapture(s))
	g, err := d.StreamEndCapture(s)
	require.NoError(t, err, "an empty capture is a graph")
	x, err := d.GraphInstantiate(g)
	require.NoError(t, err)
	require.NoError(t, d.StreamBeginCapture(other))
	requireCode(t, cudaapi.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, d.GraphLaunch(x, other))
	require.NoError(t, d.StreamDestroy(other), "destroying a capturing stream drops its capture")
	require.NoError(t, d.GraphLaunch(x, s))
	require.NoError(t, d.StreamSynchronize(s))
	require.NoError(t, d.GraphExecDestroy(x))
	require.NoError(t, d.GraphDestroy(g))
	require.NoError(t, d.StreamDestroy(s))
	require.True(t, d.Live().Zero(), "%v", d.Live())
}
