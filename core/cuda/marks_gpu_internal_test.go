//go:build gpu

package cuda

import (
	"bytes"
	"fmt"
	"sync"
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
	d, err := New(0)
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

// TestGPUStreamSynchronizeByMarkConcurrently: goroutines waiting at once,
// on streams of their own and on one shared stream, each return only after
// their own readback landed, and every word comes back.
func TestGPUStreamSynchronizeByMarkConcurrently(t *testing.T) {
	d, err := New(0)
	require.NoError(t, err)
	defer func() { assert.NoError(t, d.Close()) }()
	require.NotNil(t, d.marks)
	shared, err := d.StreamCreate()
	require.NoError(t, err)
	defer func() { assert.NoError(t, d.StreamDestroy(shared)) }()
	const workers, n, rounds = 8, 1 << 20, 20
	dev, err := d.MemAlloc(workers * n)
	require.NoError(t, err)
	defer func() { assert.NoError(t, d.MemFree(dev)) }()
	fill, err := d.HostAlloc(workers * n)
	require.NoError(t, err)
	for i := range fill {
		fill[i] = byte(i/n*31 + i%251)
	}
	require.NoError(t, d.MemcpyHtoDAsync(dev, fill, shared))
	require.NoError(t, d.StreamSynchronize(shared))
	var wg sync.WaitGroup
	errs := make(chan error, workers*(rounds+2))
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := shared
			if w%2 == 0 {
				own, err := d.StreamCreate()
				if err != nil {
					errs <- err
					return
				}
				defer func() {
					if err := d.StreamDestroy(own); err != nil {
						errs <- err
					}
				}()
				s = own
			}
			host := fill[w*n : (w+1)*n]
			out, err := d.HostAlloc(n)
			if err != nil {
				errs <- err
				return
			}
			defer func() {
				if err := d.HostFree(unsafe.Pointer(&out[0])); err != nil {
					errs <- err
				}
			}()
			for range rounds {
				clear(out)
				if err := d.MemcpyDtoHAsync(out, dev+uint64(w*n), s); err != nil {
					errs <- err
					return
				}
				if err := d.StreamSynchronize(s); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(out, host) {
					errs <- fmt.Errorf("worker %d: the readback had not landed when its wait returned", w)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	assert.False(t, d.marks.off.Load())
	assert.Len(t, d.marks.free, markWords, "every word came back")
	require.NoError(t, d.HostFree(unsafe.Pointer(&fill[0])))
}
