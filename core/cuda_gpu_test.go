//go:build gpu

// Tests of Backends over the real driver (the driver's own tests are in
// core/cuda). They need an NVIDIA GPU and libcuda; build them with `make
// gpu-test-bin` and run them on a GPU machine (see README.md, "Running the
// GPU suite").

package core_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
)

// granularity is how far the driver's free-memory report may move for
// reasons of its own (its allocation granularity on current GPUs).
const granularity = 2 << 20

// gpuDriver returns the raw driver on device 0, closed at cleanup. The
// Driver it returns hides Close, so a Backend built over it leaves the
// context alive for the suite's free-memory check after Backend.Close.
func gpuDriver(t *testing.T) core.Driver {
	t.Helper()
	drv, err := core.NewCUDADriver(0)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, drv.(io.Closer).Close()) })
	return struct{ core.Driver }{drv}
}

// The conformance suite over this driver runs in TestConformanceCUDA
// (conformance_gpu_test.go).

// warnRecorder keeps every log record at Warn or above.
type warnRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *warnRecorder) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (r *warnRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec.Message)
	return nil
}
func (r *warnRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *warnRecorder) WithGroup(string) slog.Handler      { return r }
func (r *warnRecorder) messages() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.msgs...)
}

func TestGPUDevices(t *testing.T) {
	devs, err := core.Devices()
	require.NoError(t, err)
	require.NotEmpty(t, devs)
	for i, d := range devs {
		t.Logf("device %d: %s, %d MiB, sm_%d%d, driver CUDA %d", d.Ordinal, d.Name, d.TotalMemory>>20, d.CCMajor, d.CCMinor, d.DriverVersion)
		assert.Equal(t, i, d.Ordinal)
		assert.NotEmpty(t, d.Name)
		assert.NotZero(t, d.TotalMemory)
		assert.GreaterOrEqual(t, d.CCMajor, 5)
		assert.GreaterOrEqual(t, d.DriverVersion, 10000)
	}

	b, err := core.OpenCUDA(0)
	require.NoError(t, err)
	info := b.DeviceInfo()
	assert.Equal(t, devs[0].Name, info.Name)
	assert.Equal(t, devs[0].TotalMemory, info.TotalMemory)
	assert.Equal(t, [2]int{devs[0].CCMajor, devs[0].CCMinor}, [2]int{info.CCMajor, info.CCMinor})
	assert.NotZero(t, info.FeatureKey)
	require.NoError(t, b.Close())
	assert.ErrorIs(t, b.Close(), core.ErrClosed)
	_, err = b.Alloc(1)
	assert.ErrorIs(t, err, core.ErrClosed)

	for _, ord := range []int{-1, len(devs), 1 << 40} {
		b, err := core.OpenCUDA(ord)
		assert.Nil(t, b)
		assert.ErrorIs(t, err, core.ErrInvalidArgument, "ordinal %d", ord)
	}
}

// TestGPUDeviceMemoryReturnsAfterClose is the device-side leak check: with
// the context held alive by a second retain, everything a Backend allocated
// must be gone (per cuMemGetInfo) after its Close, and no pinned memory may
// be left for the driver to clean up.
func TestGPUDeviceMemoryReturnsAfterClose(t *testing.T) {
	probe := gpuDriver(t)
	freeBefore, _, err := probe.MemGetInfo()
	require.NoError(t, err)

	rec := &warnRecorder{}
	b, err := core.OpenCUDA(0, core.WithLogger(slog.New(rec)))
	require.NoError(t, err)
	r := rand.New(rand.NewSource(6))
	var bufs []core.Buffer
	var ups []core.UploadAt
	for _, sz := range []struct{ n, count int }{{1, 4}, {4096, 4}, {1 << 20, 4}, {3<<20 + 7, 4}, {64 << 20, 2}, {256 << 20, 1}} {
		n := sz.n
		for range sz.count {
			h, err := b.Alloc(n)
			require.NoError(t, err)
			data := make([]byte, n)
			r.Read(data)
			bufs, ups = append(bufs, h), append(ups, core.UploadAt{Buf: h, Data: data})
		}
	}
	require.NoError(t, b.Upload(ups...))
	got, err := b.DownloadMany(allOf(bufs), nil)
	require.NoError(t, err)
	for i := range got {
		require.True(t, bytes.Equal(got[i], ups[i].Data), "buffer %d", i)
	}
	p, err := b.AllocHostPinned(1 << 20)
	require.NoError(t, err)
	require.NoError(t, b.UploadAsync(core.UploadAt{Buf: bufs[8], Offset: 0, Data: p.Bytes()[:1<<20]}))
	require.NoError(t, b.SynchronizeUploads())
	for _, h := range bufs[:len(bufs)/2] { // half freed (to the pool), half left for Close
		require.NoError(t, b.Free(h))
	}
	freeDuring, _, err := probe.MemGetInfo()
	require.NoError(t, err)
	require.Less(t, freeDuring+256<<20, freeBefore, "the work above must show in cuMemGetInfo, or this test proves nothing")

	require.NoError(t, b.Close())
	freeAfter, _, err := probe.MemGetInfo()
	require.NoError(t, err)
	t.Logf("free device memory: %d before Open, %d during, %d after Close (difference %d bytes)",
		freeBefore, freeDuring, freeAfter, int64(freeBefore)-int64(freeAfter))
	assert.LessOrEqual(t, freeBefore, freeAfter+granularity, "device memory leaked")
	assert.Empty(t, rec.messages(), "the Backend left work for the driver's Close or logged a failure")
}

// TestGPUContextOnFreshThreads runs calls on goroutines that each lock a new
// OS thread and never unlock it, so the thread dies with the goroutine and
// every worker starts on a thread the context was never current on.
func TestGPUContextOnFreshThreads(t *testing.T) {
	b, err := core.OpenCUDA(0)
	require.NoError(t, err)
	defer func() { require.NoError(t, b.Close()) }()
	const workers = 32
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread() // deliberately never unlocked
			errs <- roundTrip(b, int64(w), 1+w*1000)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err)
	}
}

func roundTrip(b *core.Backend, seed int64, n int) error {
	h, err := b.Alloc(n)
	if err != nil {
		return err
	}
	defer b.Free(h)
	data := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(data)
	if err := b.Upload(core.UploadAt{Buf: h, Data: data}); err != nil {
		return err
	}
	got, err := b.Download(h.All(), nil)
	if err != nil {
		return err
	}
	if !bytes.Equal(got, data) {
		return fmt.Errorf("seed %d: %d bytes differ after a round trip", seed, n)
	}
	return b.Free(h)
}
