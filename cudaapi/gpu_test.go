//go:build gpu && cgo

package cudaapi_test

import (
	"crypto/rand"
	_ "embed"
	"encoding/binary"
	"errors"
	"runtime"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/cudaapi"
)

//go:embed testdata/fill.ptx
var fillPTX []byte

// gpuContext initialises the driver, makes device 0's primary context current
// on this test's (locked) OS thread and releases it when the test ends.
func gpuContext(tb testing.TB) (cudaapi.Device, cudaapi.Context) {
	tb.Helper()
	if err := cudaapi.Loaded(); err != nil {
		tb.Skipf("no CUDA driver: %v", err)
	}
	require.NoError(tb, cudaapi.Init(0))
	dev, err := cudaapi.DeviceGet(0)
	require.NoError(tb, err)
	ctx, err := cudaapi.DevicePrimaryCtxRetain(dev)
	require.NoError(tb, err)
	require.NotZero(tb, ctx)
	runtime.LockOSThread()
	tb.Cleanup(func() {
		assert.NoError(tb, cudaapi.DevicePrimaryCtxRelease(dev))
		runtime.UnlockOSThread()
	})
	require.NoError(tb, cudaapi.CtxSetCurrent(ctx))
	return dev, ctx
}

func TestGPUDeviceInfo(t *testing.T) {
	dev, _ := gpuContext(t)
	ver, err := cudaapi.DriverGetVersion()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, ver, int32(11000))
	count, err := cudaapi.DeviceGetCount()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, count, int32(1))
	name, err := cudaapi.DeviceGetName(dev)
	require.NoError(t, err)
	assert.NotEmpty(t, name)
	total, err := cudaapi.DeviceTotalMem(dev)
	require.NoError(t, err)
	free, total2, err := cudaapi.MemGetInfo()
	require.NoError(t, err)
	assert.Equal(t, total, total2)
	assert.LessOrEqual(t, free, total)
	major, err := cudaapi.DeviceGetAttribute(cudaapi.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, major, int32(7))
	t.Logf("driver %d, %d device(s), %q compute capability %d.x, %d MiB total, %d MiB free", ver, count, name, major, total>>20, free>>20)
}

func TestGPUPrimaryContextCurrent(t *testing.T) {
	_, ctx := gpuContext(t)
	got, err := cudaapi.CtxGetCurrent()
	require.NoError(t, err)
	assert.Equal(t, ctx, got)
	require.NoError(t, cudaapi.CtxSynchronize())
}

func TestGPUCopyRoundTrip(t *testing.T) {
	gpuContext(t)
	const n = 1 << 20
	d, err := cudaapi.MemAlloc(n)
	require.NoError(t, err)
	defer func() { assert.NoError(t, cudaapi.MemFree(d)) }()

	src := make([]byte, n)
	_, _ = rand.Read(src)
	dst := make([]byte, n)
	require.NoError(t, cudaapi.MemcpyHtoD(d, unsafe.Pointer(&src[0]), n))
	require.NoError(t, cudaapi.MemcpyDtoH(unsafe.Pointer(&dst[0]), d, n))
	assert.Equal(t, src, dst, "bytes differ after H2D + D2H")

	// Pinned memory and the async path on a non-blocking stream.
	s, err := cudaapi.StreamCreate(cudaapi.CU_STREAM_NON_BLOCKING)
	require.NoError(t, err)
	defer func() { assert.NoError(t, cudaapi.StreamDestroy(s)) }()
	pinned, err := cudaapi.MemHostAlloc(n, 0)
	require.NoError(t, err)
	defer func() { assert.NoError(t, cudaapi.MemFreeHost(pinned)) }()
	host := unsafe.Slice((*byte)(pinned), n)
	_, _ = rand.Read(host)
	want := append([]byte(nil), host...)
	d2, err := cudaapi.MemAlloc(n)
	require.NoError(t, err)
	defer func() { assert.NoError(t, cudaapi.MemFree(d2)) }()
	require.NoError(t, cudaapi.MemcpyHtoDAsync(d, pinned, n, s))
	require.NoError(t, cudaapi.MemcpyDtoDAsync(d2, d, n, s))
	clear(host)
	require.NoError(t, cudaapi.MemcpyDtoHAsync(pinned, d2, n, s))
	require.NoError(t, cudaapi.StreamSynchronize(s))
	assert.Equal(t, want, host, "bytes differ after async H2D, D2D, D2H")

	require.NoError(t, cudaapi.MemsetD8Async(d, 0xA5, n, s))
	require.NoError(t, cudaapi.MemcpyDtoHAsync(pinned, d, n, s))
	require.NoError(t, cudaapi.StreamSynchronize(s))
	for i, b := range host {
		if b != 0xA5 {
			t.Fatalf("byte %d after memset = %#x, want 0xa5", i, b)
		}
	}
}

func TestGPUStreamAndEvents(t *testing.T) {
	gpuContext(t)
	s, err := cudaapi.StreamCreate(cudaapi.CU_STREAM_NON_BLOCKING)
	require.NoError(t, err)
	defer func() { assert.NoError(t, cudaapi.StreamDestroy(s)) }()
	start, err := cudaapi.EventCreate(cudaapi.CU_EVENT_DEFAULT)
	require.NoError(t, err)
	defer func() { assert.NoError(t, cudaapi.EventDestroy(start)) }()
	end, err := cudaapi.EventCreate(cudaapi.CU_EVENT_DEFAULT)
	require.NoError(t, err)
	defer func() { assert.NoError(t, cudaapi.EventDestroy(end)) }()
	d, err := cudaapi.MemAllocAsync(64<<20, s)
	require.NoError(t, err)

	require.NoError(t, cudaapi.EventRecord(start, s))
	require.NoError(t, cudaapi.MemsetD8Async(d, 1, 64<<20, s))
	require.NoError(t, cudaapi.EventRecord(end, s))
	require.NoError(t, cudaapi.StreamWaitEvent(s, end, 0))
	require.NoError(t, cudaapi.EventSynchronize(end))
	require.NoError(t, cudaapi.EventQuery(end))
	ms, err := cudaapi.EventElapsedTime(start, end)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, ms, float32(0))
	require.NoError(t, cudaapi.MemFreeAsync(d, s))
	require.NoError(t, cudaapi.StreamSynchronize(s))
	require.NoError(t, cudaapi.StreamQuery(s))
	t.Logf("64 MiB memset: %.3f ms", ms)
}

func TestGPUModuleLaunch(t *testing.T) {
	gpuContext(t)
	mod, err := cudaapi.ModuleLoadImage(fillPTX)
	require.NoError(t, err)
	defer func() { assert.NoError(t, cudaapi.ModuleUnload(mod)) }()
	f, err := cudaapi.ModuleGetFunction(mod, "vyre_fill")
	require.NoError(t, err)
	maxThreads, err := cudaapi.FuncGetAttribute(cudaapi.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f)
	require.NoError(t, err)
	assert.Positive(t, maxThreads)
	_, err = cudaapi.ModuleGetFunction(mod, "no_such_kernel")
	assert.ErrorIs(t, err, cudaapi.CUDA_ERROR_NOT_FOUND)

	const n, base = 100_000, 7
	d, err := cudaapi.MemAlloc(n * 4)
	require.NoError(t, err)
	defer func() { assert.NoError(t, cudaapi.MemFree(d)) }()
	kp, err := cudaapi.NewKernelParams(3)
	require.NoError(t, err)
	defer kp.Free()
	require.NoError(t, kp.SetDevicePtr(0, d))
	require.NoError(t, kp.SetUint32(1, n))
	require.NoError(t, kp.SetUint32(2, base))
	require.NoError(t, cudaapi.LaunchKernel(f, (n+255)/256, 1, 1, 256, 1, 1, 0, 0, kp.Pointer(), nil))
	require.NoError(t, cudaapi.CtxSynchronize())
	out := make([]byte, n*4)
	require.NoError(t, cudaapi.MemcpyDtoH(unsafe.Pointer(&out[0]), d, n*4))
	for i := 0; i < n; i++ {
		if got := binary.LittleEndian.Uint32(out[4*i:]); got != uint32(base+i) {
			t.Fatalf("out[%d] = %d, want %d", i, got, base+i)
		}
	}
}

func TestGPUGraphCapture(t *testing.T) {
	gpuContext(t)
	s, err := cudaapi.StreamCreate(cudaapi.CU_STREAM_NON_BLOCKING)
	require.NoError(t, err)
	defer func() { assert.NoError(t, cudaapi.StreamDestroy(s)) }()
	d, err := cudaapi.MemAlloc(4096)
	require.NoError(t, err)
	defer func() { assert.NoError(t, cudaapi.MemFree(d)) }()
	require.NoError(t, cudaapi.StreamBeginCapture(s, cudaapi.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL))
	require.NoError(t, cudaapi.MemsetD8Async(d, 0x3C, 4096, s))
	g, err := cudaapi.StreamEndCapture(s)
	require.NoError(t, err)
	defer func() { assert.NoError(t, cudaapi.GraphDestroy(g)) }()
	exec, err := cudaapi.GraphInstantiateWithFlags(g, 0)
	require.NoError(t, err)
	defer func() { assert.NoError(t, cudaapi.GraphExecDestroy(exec)) }()
	require.NoError(t, cudaapi.GraphLaunch(exec, s))
	require.NoError(t, cudaapi.StreamSynchronize(s))
	out := make([]byte, 4096)
	require.NoError(t, cudaapi.MemcpyDtoH(unsafe.Pointer(&out[0]), d, 4096))
	assert.Equal(t, byte(0x3C), out[0])
	assert.Equal(t, byte(0x3C), out[4095])
}

func TestGPUOutOfMemory(t *testing.T) {
	gpuContext(t)
	d, err := cudaapi.MemAlloc(1 << 50)
	require.Error(t, err)
	assert.Zero(t, d)
	var r cudaapi.Result
	require.True(t, errors.As(err, &r), "error %v is not a Result", err)
	assert.Equal(t, cudaapi.CUDA_ERROR_OUT_OF_MEMORY, r)
	assert.Equal(t, "CUDA_ERROR_OUT_OF_MEMORY", r.Name())
	assert.Contains(t, err.Error(), "CUDA_ERROR_OUT_OF_MEMORY: ")
	t.Logf("1 PiB allocation: %v", err)
}

func TestGPUPeerAccessQuery(t *testing.T) {
	dev, _ := gpuContext(t)
	can, err := cudaapi.DeviceCanAccessPeer(dev, dev)
	require.NoError(t, err)
	assert.Zero(t, can, "a device is not its own peer")
}

func BenchmarkGPUCtxGetCurrent(b *testing.B) {
	gpuContext(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := cudaapi.CtxGetCurrent(); err != nil {
			b.Fatal(err)
		}
	}
}
