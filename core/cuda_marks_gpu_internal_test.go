//go:build gpu

package core

import (
	"bytes"
	"log/slog"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGPUStreamSynchronizeByMark checks, on a real device, that a stream
// wait through a completion mark returns only once the DMA before it has
// landed, for a short DMA (the mark is seen) and for one longer than the
// mark's spin (the wait falls back to the driver), and that every word
// comes back afterwards.
func TestGPUStreamSynchronizeByMark(t *testing.T) {
	d, err := newCUDADriver("test", 0, slog.Default())
	require.NoError(t, err)
	defer func() { assert.NoError(t, d.Close()) }()
	require.NotNil(t, d.marks, "the driver gives a page the device can write")
	s, err := d.StreamCreate()
	require.NoError(t, err)
	defer func() { assert.NoError(t, d.StreamDestroy(s)) }()
	for _, n := range []int{4 << 10, 256 << 10, 256 << 20} {
		dev, err := d.MemAlloc(uint64(n))
		require.NoError(t, err)
		host, err := d.HostAlloc(uint64(n))
		require.NoError(t, err)
		for i := range host {
			host[i] = byte(i*7 + n)
		}
		require.NoError(t, d.MemcpyHtoDAsync(dev, host, s))
		require.NoError(t, d.StreamSynchronize(s))
		clear(host)
		start := time.Now()
		require.NoError(t, d.MemcpyDtoHAsync(host, dev, s))
		require.NoError(t, d.StreamSynchronize(s))
		took := time.Since(start)
		want := make([]byte, n)
		for i := range want {
			want[i] = byte(i*7 + n)
		}
		assert.True(t, bytes.Equal(want, host), "%d bytes: the readback must have landed when the wait returns (took %v)", n, took)
		assert.False(t, d.marks.off.Load(), "the driver accepted the marks")
		assert.Len(t, d.marks.free, markWords, "every word came back after a %d-byte wait", n)
		require.NoError(t, d.HostFree(unsafe.Pointer(&host[0])))
		require.NoError(t, d.MemFree(dev))
	}
}
