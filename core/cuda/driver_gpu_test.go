//go:build gpu

// Tests of the real driver on its own. They need an NVIDIA GPU and libcuda;
// build them with `make gpu-test-bin` and run them on a GPU machine (see
// docs/TESTING.md, "The GPU suite").

package cuda_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math/rand"
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/cuda"
	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/core/kernels"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// granularity is how far the driver's free-memory report may move for
// reasons of its own (its allocation granularity on current GPUs).
const granularity = 2 << 20

// openDriver returns the driver on device 0, closed at cleanup.
func openDriver(t *testing.T) *cuda.Driver {
	t.Helper()
	drv, err := cuda.New(0)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, drv.Close()) })
	return drv
}

// TestGPUStreamChurnKeepsNoMemory shows where the few MiB the conformance
// suite's first 16-goroutine run loses go: CUDA keeps device memory for the
// most streams a context has had at once, for the context's life. Creating
// and destroying the same number again must cost nothing more.
func TestGPUStreamChurnKeepsNoMemory(t *testing.T) {
	probe := openDriver(t)
	drv := openDriver(t)
	free := func() uint64 {
		f, _, err := probe.MemGetInfo()
		require.NoError(t, err)
		return f
	}
	churn := func(k int) {
		streams := make([]driver.Stream, k)
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

// gpuRig holds the device memory, pinned host memory, stream and events
// that TestGPUDriver's checks share.
type gpuRig struct {
	drv              *cuda.Driver
	host, out        []byte // pinned, n bytes each; host holds seeded random bytes
	a, c             uint64 // device buffers of n bytes
	s                driver.Stream
	start, end, done driver.Event // start and end time; done does not
}

// TestGPUDriver exercises every raw Driver method on the real device.
func TestGPUDriver(t *testing.T) {
	drv := openDriver(t)
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
	rig := gpuRig{drv: drv, host: host, out: out, a: a, c: c, s: s, start: start, end: end, done: done}

	want := checkGPURoundTrip(t, rig)

	// Kernel launch: the built-in fill kernel against its Go twin.
	mod, err := drv.ModuleLoad(kernels.FillPTX)
	require.NoError(t, err)
	defer func() { assert.NoError(t, drv.ModuleUnload(mod)) }()
	checkGPUFillKernel(t, rig, mod, want)
	checkGPURegisteredMemory(t, rig)
	checkGPURefusesUnpinned(t, rig)
}

// checkGPURoundTrip runs H2D, a memset of a middle slice, D2D and D2H, and
// checks the result matches the same steps done on the host, that the
// stream and events report done, and that only timing events have a time.
// It returns the host's copy of the expected bytes.
func checkGPURoundTrip(t *testing.T, rig gpuRig) []byte {
	drv, s, a, c, host, out := rig.drv, rig.s, rig.a, rig.c, rig.host, rig.out
	start, end, done := rig.start, rig.end, rig.done
	n := uint64(len(host))
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
	return want
}

// checkGPUFillKernel launches the built-in fill kernel from mod on part of
// buffer c and checks the bytes read back match its Go twin applied to
// want; it also checks an unknown kernel name is not found.
func checkGPUFillKernel(t *testing.T, rig gpuRig, mod driver.Module, want []byte) {
	drv, s, c, out := rig.drv, rig.s, rig.c, rig.out
	fn, err := drv.ModuleFunction(mod, kernels.FillEntry)
	require.NoError(t, err)
	_, err = drv.ModuleFunction(mod, "no_such_kernel")
	assertResult(t, err, cudaapi.CUDA_ERROR_NOT_FOUND)
	const words = 3000
	cfg := driver.LaunchConfig{Grid: [3]uint32{4, 1, 1}, Block: [3]uint32{128, 1, 1}}
	require.NoError(t, drv.Launch(fn, cfg, s, []driver.KernelArg{{Ptr: c + 8, IsPtr: true}, {U32: words}, {U32: 0xC0FFEE11}}))
	require.NoError(t, drv.MemcpyDtoHAsync(out, c, s))
	require.NoError(t, drv.StreamSynchronize(s))
	kernels.Fill(want[8:], words, 0xC0FFEE11)
	require.True(t, bytes.Equal(want, out), "fill kernel result differs from its Go twin")
}

// checkGPURegisteredMemory checks registered caller memory works for async
// copies, and that registering an overlapping range or unregistering an
// unknown one is refused.
func checkGPURegisteredMemory(t *testing.T, rig gpuRig) {
	drv, s, a, out := rig.drv, rig.s, rig.a, rig.out
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
}

// checkGPURefusesUnpinned checks Go memory never reaches an asynchronous
// copy, only HostAlloc's first bytes may be freed, and a null stream or an
// impossible allocation is refused.
func checkGPURefusesUnpinned(t *testing.T, rig gpuRig) {
	drv, s, a, host := rig.drv, rig.s, rig.a, rig.host
	n := len(host)
	goMem := make([]byte, 4096)
	assertResult(t, drv.MemcpyHtoDAsync(a, goMem, s), cudaapi.CUDA_ERROR_INVALID_VALUE)
	assertResult(t, drv.MemcpyDtoHAsync(goMem, a, s), cudaapi.CUDA_ERROR_INVALID_VALUE)
	assertResult(t, drv.MemcpyHtoDAsync(a, host[n-10:], s), 0) // tail of a pinned block is fine
	assertResult(t, drv.HostFree(unsafe.Pointer(&goMem[0])), cudaapi.CUDA_ERROR_INVALID_VALUE)
	assertResult(t, drv.HostFree(unsafe.Pointer(&host[1])), cudaapi.CUDA_ERROR_INVALID_VALUE)
	assertResult(t, drv.StreamSynchronize(0), cudaapi.CUDA_ERROR_INVALID_VALUE)
	_, err := drv.MemAlloc(1 << 60)
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
	drv, err := cuda.New(0)
	require.NoError(t, err)
	_, err = drv.HostAlloc(4096)
	require.NoError(t, err)
	caller := make([]byte, 8192)
	require.NoError(t, drv.HostRegister(unsafe.Pointer(&caller[0]), uint64(len(caller))))
	require.NoError(t, drv.Close())
	assert.Len(t, rec.messages(), 2, "one warning per leftover range")
	runtime.KeepAlive(caller)
	_, _, err = drv.MemGetInfo()
	assert.ErrorIs(t, err, errs.ErrClosed)
	assert.ErrorIs(t, drv.Close(), errs.ErrClosed)
}

// TestGPUDevicesAgreeWithNew lists the devices, opens each, and checks that
// the driver describes the device Devices listed; ordinals outside the
// list are refused.
func TestGPUDevicesAgreeWithNew(t *testing.T) {
	devs, err := cuda.Devices()
	require.NoError(t, err)
	n, err := cuda.Count()
	require.NoError(t, err)
	require.Len(t, devs, n)
	for i, s := range devs {
		assert.Equal(t, i, s.Ordinal)
		drv, err := cuda.New(i)
		require.NoError(t, err)
		info, err := drv.Info()
		require.NoError(t, err)
		assert.Equal(t, s.Name, info.Name)
		assert.Equal(t, s.TotalMemory, info.TotalMemory)
		assert.Equal(t, [2]int{s.CCMajor, s.CCMinor}, [2]int{info.CCMajor, info.CCMinor})
		assert.NotZero(t, info.FeatureKey)
		assert.Equal(t, s.Capabilities, drv.Capabilities())
		require.NoError(t, drv.Close())
	}
	for _, ord := range []int{-1, n, 1 << 40} {
		drv, err := cuda.New(ord)
		assert.Nil(t, drv)
		assert.ErrorIs(t, err, errs.ErrInvalidArgument, "ordinal %d", ord)
	}
}
