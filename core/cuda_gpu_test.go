//go:build gpu

// Tests of the real driver. They need an NVIDIA GPU and libcuda; build them
// with `make gpu-test-bin` and run them on a GPU machine (see docs/TESTING.md, "The GPU suite").

package core_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/kernels"
	"github.com/vyre-go/vyrecuda/cudaapi"
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

// TestGPUStreamChurnKeepsNoMemory shows where the few MiB the conformance
// suite's first 16-goroutine run loses go: CUDA keeps device memory for the
// most streams a context has had at once, for the context's life. Creating
// and destroying the same number again must cost nothing more.
func TestGPUStreamChurnKeepsNoMemory(t *testing.T) {
	probe := gpuDriver(t)
	drv := gpuDriver(t)
	free := func() uint64 {
		f, _, err := probe.MemGetInfo()
		require.NoError(t, err)
		return f
	}
	churn := func(k int) {
		streams := make([]core.Stream, k)
		for i := range streams {
			s, err := drv.StreamCreate()
			require.NoError(t, err)
			streams[i] = s
		}
		for _, s := range streams {
			require.NoError(t, drv.StreamDestroy(s))
		}
	}
	start := free()
	var after []uint64
	for _, k := range []int{8, 16, 32, 32, 16} {
		churn(k)
		after = append(after, free())
		t.Logf("after %d streams created and destroyed: %d bytes less free than at the start", k, int64(start)-int64(after[len(after)-1]))
	}
	assert.LessOrEqual(t, after[2], after[3]+granularity, "a second round of 32 streams must not keep more memory")
	assert.LessOrEqual(t, after[3], after[4]+granularity, "fewer streams must not keep more memory")
}

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
	_, err = b.AllocateResident(1)
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
	var ups []core.Upload
	for _, sz := range []struct{ n, count int }{{1, 4}, {4096, 4}, {1 << 20, 4}, {3<<20 + 7, 4}, {64 << 20, 2}, {256 << 20, 1}} {
		n := sz.n
		for range sz.count {
			h, err := b.AllocateResident(n)
			require.NoError(t, err)
			data := make([]byte, n)
			r.Read(data)
			bufs, ups = append(bufs, h), append(ups, core.Upload{Buf: h, Data: data})
		}
	}
	require.NoError(t, b.UploadResidentMany(ups))
	got, err := b.DownloadResidentMany(bufs)
	require.NoError(t, err)
	for i := range got {
		require.True(t, bytes.Equal(got[i], ups[i].Data), "buffer %d", i)
	}
	p, err := b.AllocHostPinned(1 << 20)
	require.NoError(t, err)
	require.NoError(t, b.UploadResidentAsyncAt(bufs[8], 0, p.Pointer(), 1<<20))
	require.NoError(t, b.SynchronizeUploads())
	for _, h := range bufs[:len(bufs)/2] { // half freed (to the pool), half left for Close
		require.NoError(t, b.FreeResident(h))
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
	h, err := b.AllocateResident(n)
	if err != nil {
		return err
	}
	defer b.FreeResident(h)
	data := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(data)
	if err := b.UploadResident(h, data); err != nil {
		return err
	}
	got, err := b.DownloadResident(h)
	if err != nil {
		return err
	}
	if !bytes.Equal(got, data) {
		return fmt.Errorf("seed %d: %d bytes differ after a round trip", seed, n)
	}
	return b.FreeResident(h)
}

// TestGPUDriver exercises every raw Driver method on the real device.
func TestGPUDriver(t *testing.T) {
	drv := gpuDriver(t)
	const n = 1 << 20
	host, err := drv.HostAlloc(n)
	require.NoError(t, err)
	require.Len(t, host, n)
	defer func() { assert.NoError(t, drv.HostFree(unsafe.Pointer(&host[0]))) }()
	out, err := drv.HostAlloc(n)
	require.NoError(t, err)
	defer func() { assert.NoError(t, drv.HostFree(unsafe.Pointer(&out[0]))) }()
	rand.New(rand.NewSource(7)).Read(host)

	a, err := drv.MemAlloc(n)
	require.NoError(t, err)
	defer func() { assert.NoError(t, drv.MemFree(a)) }()
	c, err := drv.MemAlloc(n)
	require.NoError(t, err)
	defer func() { assert.NoError(t, drv.MemFree(c)) }()
	s, err := drv.StreamCreate()
	require.NoError(t, err)
	require.NotZero(t, s)
	defer func() { assert.NoError(t, drv.StreamDestroy(s)) }()
	start, err := drv.EventCreate(true)
	require.NoError(t, err)
	defer func() { assert.NoError(t, drv.EventDestroy(start)) }()
	end, err := drv.EventCreate(true)
	require.NoError(t, err)
	defer func() { assert.NoError(t, drv.EventDestroy(end)) }()
	done, err := drv.EventCreate(false)
	require.NoError(t, err)
	defer func() { assert.NoError(t, drv.EventDestroy(done)) }()

	// H2D, memset a middle slice, D2D, D2H: the result must match the same
	// steps done on the host.
	require.NoError(t, drv.EventRecord(start, s))
	require.NoError(t, drv.MemcpyHtoDAsync(a, host, s))
	require.NoError(t, drv.MemsetD8Async(a+1000, 0xAB, 5000, s))
	require.NoError(t, drv.MemcpyDtoDAsync(c, a, n, s))
	require.NoError(t, drv.MemcpyDtoHAsync(out, c, s))
	require.NoError(t, drv.EventRecord(end, s))
	require.NoError(t, drv.EventRecord(done, s))
	require.NoError(t, drv.StreamWaitEvent(s, done))
	require.NoError(t, drv.EventSynchronize(done))
	require.NoError(t, drv.StreamSynchronize(s))
	want := append([]byte(nil), host...)
	for i := 1000; i < 6000; i++ {
		want[i] = 0xAB
	}
	require.True(t, bytes.Equal(want, out), "device round trip differs")
	ok, err := drv.StreamQuery(s)
	require.NoError(t, err)
	assert.True(t, ok)
	ok, err = drv.EventQuery(done)
	require.NoError(t, err)
	assert.True(t, ok)
	el, err := drv.EventElapsed(start, end)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, el, time.Duration(0))
	_, err = drv.EventElapsed(start, done)
	assert.Error(t, err, "a completion event (timing disabled) has no time")

	// Kernel launch: the built-in fill kernel against its Go twin.
	mod, err := drv.ModuleLoad(kernels.FillPTX)
	require.NoError(t, err)
	defer func() { assert.NoError(t, drv.ModuleUnload(mod)) }()
	fn, err := drv.ModuleFunction(mod, kernels.FillEntry)
	require.NoError(t, err)
	_, err = drv.ModuleFunction(mod, "no_such_kernel")
	assertResult(t, err, cudaapi.CUDA_ERROR_NOT_FOUND)
	const words = 3000
	cfg := core.LaunchConfig{Grid: [3]uint32{4, 1, 1}, Block: [3]uint32{128, 1, 1}}
	require.NoError(t, drv.Launch(fn, cfg, s, []core.KernelArg{{Ptr: c + 8, IsPtr: true}, {U32: words}, {U32: 0xC0FFEE11}}))
	require.NoError(t, drv.MemcpyDtoHAsync(out, c, s))
	require.NoError(t, drv.StreamSynchronize(s))
	kernels.Fill(want[8:], words, 0xC0FFEE11)
	require.True(t, bytes.Equal(want, out), "fill kernel result differs from its Go twin")

	// Registered caller memory is usable for async copies, and overlapping
	// or unknown ranges are refused.
	caller := make([]byte, 64<<10)
	rand.New(rand.NewSource(8)).Read(caller)
	require.NoError(t, drv.HostRegister(unsafe.Pointer(&caller[0]), uint64(len(caller))))
	assertResult(t, drv.HostRegister(unsafe.Pointer(&caller[100]), 10), cudaapi.CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED)
	require.NoError(t, drv.MemcpyHtoDAsync(a, caller, s))
	require.NoError(t, drv.MemcpyDtoHAsync(out[:len(caller)], a, s))
	require.NoError(t, drv.StreamSynchronize(s))
	require.True(t, bytes.Equal(caller, out[:len(caller)]))
	assertResult(t, drv.HostUnregister(unsafe.Pointer(&caller[1])), cudaapi.CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED)
	require.NoError(t, drv.HostUnregister(unsafe.Pointer(&caller[0])))
	runtime.KeepAlive(caller)

	// Go memory never reaches an asynchronous copy, and only HostAlloc's
	// first bytes may be freed.
	goMem := make([]byte, 4096)
	assertResult(t, drv.MemcpyHtoDAsync(a, goMem, s), cudaapi.CUDA_ERROR_INVALID_VALUE)
	assertResult(t, drv.MemcpyDtoHAsync(goMem, a, s), cudaapi.CUDA_ERROR_INVALID_VALUE)
	assertResult(t, drv.MemcpyHtoDAsync(a, host[n-10:], s), 0) // tail of a pinned block is fine
	assertResult(t, drv.HostFree(unsafe.Pointer(&goMem[0])), cudaapi.CUDA_ERROR_INVALID_VALUE)
	assertResult(t, drv.HostFree(unsafe.Pointer(&host[1])), cudaapi.CUDA_ERROR_INVALID_VALUE)
	assertResult(t, drv.StreamSynchronize(0), cudaapi.CUDA_ERROR_INVALID_VALUE)
	_, err = drv.MemAlloc(1 << 60)
	assertResult(t, err, cudaapi.CUDA_ERROR_OUT_OF_MEMORY)
	require.NoError(t, drv.StreamSynchronize(s))
}

// assertResult checks err carries the CUDA result want (0: no error).
func assertResult(t *testing.T, err error, want cudaapi.Result) {
	t.Helper()
	if want == 0 {
		assert.NoError(t, err)
		return
	}
	var r cudaapi.Result
	if assert.True(t, errors.As(err, &r), "want %v, got %v", want, err) {
		assert.Equal(t, want, r, "%v", err)
	}
}

// TestGPUDriverCloseFreesLeftovers checks the driver's own safety net:
// pinned memory still allocated or registered at Close is freed (and
// logged), and every call after Close is refused.
func TestGPUDriverCloseFreesLeftovers(t *testing.T) {
	rec := &warnRecorder{}
	prev := slog.Default()
	slog.SetDefault(slog.New(rec))
	defer slog.SetDefault(prev)
	drv, err := core.NewCUDADriver(0)
	require.NoError(t, err)
	_, err = drv.HostAlloc(4096)
	require.NoError(t, err)
	caller := make([]byte, 8192)
	require.NoError(t, drv.HostRegister(unsafe.Pointer(&caller[0]), uint64(len(caller))))
	require.NoError(t, drv.(io.Closer).Close())
	assert.Len(t, rec.messages(), 2, "one warning per leftover range")
	runtime.KeepAlive(caller)
	_, _, err = drv.MemGetInfo()
	assert.ErrorIs(t, err, core.ErrClosed)
	assert.ErrorIs(t, drv.(io.Closer).Close(), core.ErrClosed)
}
