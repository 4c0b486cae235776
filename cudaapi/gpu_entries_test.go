//go:build gpu && cgo

package cudaapi_test

import (
	"crypto/rand"
	"encoding/binary"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/cudaapi"
)

func TestGPUCapabilities(t *testing.T) {
	gpuContext(t)
	c, err := cudaapi.DriverCapabilities()
	require.NoError(t, err)
	v, err := cudaapi.DriverGetVersion()
	require.NoError(t, err)
	assert.Equal(t, int(v), c.DriverVersion)
	for _, f := range cudaapi.Features() {
		t.Logf("%-28s offered=%v %v", f, c.Has(f), c.Why(f))
	}
	if v >= 13000 && cudaapi.HeaderVersion >= 13000 {
		for _, f := range cudaapi.Features() {
			assert.True(t, c.Has(f), "a CUDA 13 driver offers %s: %v", f, c.Why(f))
		}
	}
}

func TestGPUStreamOrderedPool(t *testing.T) {
	dev, _ := gpuContext(t)
	s, err := cudaapi.StreamCreate(cudaapi.CU_STREAM_NON_BLOCKING)
	require.NoError(t, err)
	defer func() { assert.NoError(t, cudaapi.StreamDestroy(s)) }()
	pool, err := cudaapi.DeviceGetDefaultMemPool(dev)
	require.NoError(t, err)
	require.NotZero(t, pool)
	threshold := uint64(64 << 20)
	require.NoError(t, cudaapi.MemPoolSetAttribute(pool, cudaapi.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, unsafe.Pointer(&threshold)))
	var got uint64
	require.NoError(t, cudaapi.MemPoolGetAttribute(pool, cudaapi.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, unsafe.Pointer(&got)))
	assert.Equal(t, threshold, got)

	const n = 1 << 20
	d, err := cudaapi.MemAllocFromPoolAsync(n, pool, s)
	require.NoError(t, err)
	pinned, err := cudaapi.MemHostAlloc(n, 0)
	require.NoError(t, err)
	defer func() { assert.NoError(t, cudaapi.MemFreeHost(pinned)) }()
	host := unsafe.Slice((*byte)(pinned), n)
	_, _ = rand.Read(host)
	want := append([]byte(nil), host...)
	require.NoError(t, cudaapi.MemcpyHtoDAsync(d, pinned, n, s))
	// The copy reads host asynchronously: wait before overwriting it.
	require.NoError(t, cudaapi.StreamSynchronize(s))
	clear(host)
	require.NoError(t, cudaapi.MemcpyDtoHAsync(pinned, d, n, s))
	require.NoError(t, cudaapi.MemFreeAsync(d, s))
	require.NoError(t, cudaapi.StreamSynchronize(s))
	assert.Equal(t, want, host, "bytes differ through a pool allocation")
	require.NoError(t, cudaapi.MemPoolTrimTo(pool, 0))
}

// TestGPUVirtualMemory reserves an address range, backs it with a physical
// allocation, maps it read-write and copies through it.
func TestGPUVirtualMemory(t *testing.T) {
	dev, _ := gpuContext(t)
	// CUmemAllocationProp (32 bytes on 64-bit hosts): type, requested handle
	// types, location {type, id}, win32 metadata pointer, allocation flags.
	var prop [32]byte
	binary.LittleEndian.PutUint32(prop[0:], 1)                                    // CU_MEM_ALLOCATION_TYPE_PINNED
	binary.LittleEndian.PutUint32(prop[8:], 1)                                    // CU_MEM_LOCATION_TYPE_DEVICE
	binary.LittleEndian.PutUint32(prop[12:], uint32(dev))                         // device ordinal
	gran, err := cudaapi.MemGetAllocationGranularity(unsafe.Pointer(&prop[0]), 0) // CU_MEM_ALLOC_GRANULARITY_MINIMUM
	require.NoError(t, err)
	require.Positive(t, gran)
	size := gran
	h, err := cudaapi.MemCreate(size, unsafe.Pointer(&prop[0]), 0)
	require.NoError(t, err)
	defer func() { assert.NoError(t, cudaapi.MemRelease(h)) }()
	ptr, err := cudaapi.MemAddressReserve(size, 0, 0, 0)
	require.NoError(t, err)
	defer func() { assert.NoError(t, cudaapi.MemAddressFree(ptr, size)) }()
	require.NoError(t, cudaapi.MemMap(ptr, size, 0, h, 0))
	defer func() { assert.NoError(t, cudaapi.MemUnmap(ptr, size)) }()
	// CUmemAccessDesc: location {type, id}, flags.
	var desc [12]byte
	binary.LittleEndian.PutUint32(desc[0:], 1) // CU_MEM_LOCATION_TYPE_DEVICE
	binary.LittleEndian.PutUint32(desc[4:], uint32(dev))
	binary.LittleEndian.PutUint32(desc[8:], 3) // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
	require.NoError(t, cudaapi.MemSetAccess(ptr, size, unsafe.Pointer(&desc[0]), 1))

	src := make([]byte, 4096)
	_, _ = rand.Read(src)
	dst := make([]byte, 4096)
	require.NoError(t, cudaapi.MemcpyHtoD(ptr, unsafe.Pointer(&src[0]), 4096))
	require.NoError(t, cudaapi.MemcpyDtoH(unsafe.Pointer(&dst[0]), ptr, 4096))
	assert.Equal(t, src, dst)
	t.Logf("granularity %d bytes, mapped at %#x", gran, ptr)
}

func TestGPUPeerCopyWithinContext(t *testing.T) {
	_, ctx := gpuContext(t)
	s, err := cudaapi.StreamCreate(cudaapi.CU_STREAM_NON_BLOCKING)
	require.NoError(t, err)
	defer func() { assert.NoError(t, cudaapi.StreamDestroy(s)) }()
	a, err := cudaapi.MemAlloc(4096)
	require.NoError(t, err)
	defer func() { assert.NoError(t, cudaapi.MemFree(a)) }()
	b, err := cudaapi.MemAlloc(4096)
	require.NoError(t, err)
	defer func() { assert.NoError(t, cudaapi.MemFree(b)) }()
	require.NoError(t, cudaapi.MemsetD8Async(a, 0x5A, 4096, s))
	require.NoError(t, cudaapi.MemcpyPeerAsync(b, ctx, a, ctx, 4096, s))
	require.NoError(t, cudaapi.StreamSynchronize(s))
	out := make([]byte, 4096)
	require.NoError(t, cudaapi.MemcpyDtoH(unsafe.Pointer(&out[0]), b, 4096))
	assert.Equal(t, byte(0x5A), out[0])
	assert.Equal(t, byte(0x5A), out[4095])
	// Enabling access to one's own context is refused, not a crash.
	assert.Error(t, cudaapi.CtxEnablePeerAccess(ctx, 0))
}

func TestGPUOccupancy(t *testing.T) {
	gpuContext(t)
	mod, err := cudaapi.ModuleLoadImage(fillPTX)
	require.NoError(t, err)
	defer func() { assert.NoError(t, cudaapi.ModuleUnload(mod)) }()
	f, err := cudaapi.ModuleGetFunction(mod, "vyre_fill")
	require.NoError(t, err)
	blocks, err := cudaapi.OccupancyMaxActiveBlocksPerMultiprocessor(f, 256, 0)
	require.NoError(t, err)
	assert.Positive(t, blocks)
	minGrid, block, err := cudaapi.OccupancyMaxPotentialBlockSize(f, nil, 0, 0)
	require.NoError(t, err)
	assert.Positive(t, minGrid)
	assert.Positive(t, block)
	t.Logf("256-thread blocks per SM: %d; suggested block %d, min grid %d", blocks, block, minGrid)
}

// TestGPULaunchHostFunc queues a Go function after a memset and a copy: it
// runs once, after both, and sees the copied bytes.
func TestGPULaunchHostFunc(t *testing.T) {
	gpuContext(t)
	s, err := cudaapi.StreamCreate(cudaapi.CU_STREAM_NON_BLOCKING)
	require.NoError(t, err)
	defer func() { assert.NoError(t, cudaapi.StreamDestroy(s)) }()
	const n = 1 << 20
	d, err := cudaapi.MemAlloc(n)
	require.NoError(t, err)
	defer func() { assert.NoError(t, cudaapi.MemFree(d)) }()
	pinned, err := cudaapi.MemHostAlloc(n, 0)
	require.NoError(t, err)
	defer func() { assert.NoError(t, cudaapi.MemFreeHost(pinned)) }()
	host := unsafe.Slice((*byte)(pinned), n)
	clear(host)
	var calls, seen atomic.Int32
	require.NoError(t, cudaapi.MemsetD8Async(d, 0x77, n, s))
	require.NoError(t, cudaapi.MemcpyDtoHAsync(pinned, d, n, s))
	require.NoError(t, cudaapi.LaunchHostFunc(s, func() {
		calls.Add(1)
		seen.Store(int32(host[n-1]))
	}))
	require.NoError(t, cudaapi.StreamSynchronize(s))
	assert.Equal(t, int32(1), calls.Load())
	assert.Equal(t, int32(0x77), seen.Load(), "the host function ran after the copy before it")
}

func TestGPUCaptureStatusAndUpload(t *testing.T) {
	gpuContext(t)
	s, err := cudaapi.StreamCreate(cudaapi.CU_STREAM_NON_BLOCKING)
	require.NoError(t, err)
	defer func() { assert.NoError(t, cudaapi.StreamDestroy(s)) }()
	empty, err := cudaapi.GraphCreate(0)
	require.NoError(t, err)
	require.NoError(t, cudaapi.GraphDestroy(empty))

	d, err := cudaapi.MemAlloc(4096)
	require.NoError(t, err)
	defer func() { assert.NoError(t, cudaapi.MemFree(d)) }()
	st, err := cudaapi.StreamIsCapturing(s)
	require.NoError(t, err)
	assert.Equal(t, cudaapi.CU_STREAM_CAPTURE_STATUS_NONE, st)
	require.NoError(t, cudaapi.StreamBeginCapture(s, cudaapi.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL))
	st, err = cudaapi.StreamIsCapturing(s)
	require.NoError(t, err)
	assert.Equal(t, cudaapi.CU_STREAM_CAPTURE_STATUS_ACTIVE, st)
	require.NoError(t, cudaapi.MemsetD8Async(d, 0x11, 4096, s))
	g, err := cudaapi.StreamEndCapture(s)
	require.NoError(t, err)
	defer func() { assert.NoError(t, cudaapi.GraphDestroy(g)) }()
	exec, err := cudaapi.GraphInstantiateWithFlags(g, 0)
	require.NoError(t, err)
	defer func() { assert.NoError(t, cudaapi.GraphExecDestroy(exec)) }()
	require.NoError(t, cudaapi.GraphUpload(exec, s))
	require.NoError(t, cudaapi.GraphLaunch(exec, s))
	require.NoError(t, cudaapi.StreamSynchronize(s))
	out := make([]byte, 4096)
	require.NoError(t, cudaapi.MemcpyDtoH(unsafe.Pointer(&out[0]), d, 4096))
	assert.Equal(t, byte(0x11), out[4095])
}

func TestGPUStreamWriteValueIntoMappedHostMemory(t *testing.T) {
	gpuContext(t)
	p, err := cudaapi.MemHostAlloc(4096, cudaapi.CU_MEMHOSTALLOC_DEVICEMAP)
	require.NoError(t, err)
	defer func() { assert.NoError(t, cudaapi.MemFreeHost(p)) }()
	words := unsafe.Slice((*uint32)(p), 1024)
	dev, err := cudaapi.MemHostGetDevicePointer(p, 0)
	require.NoError(t, err)
	require.NotZero(t, dev)
	s, err := cudaapi.StreamCreate(cudaapi.CU_STREAM_NON_BLOCKING)
	require.NoError(t, err)
	defer func() { assert.NoError(t, cudaapi.StreamDestroy(s)) }()
	for i, v := range []uint32{0xdeadbeef, 7, 0} {
		atomic.StoreUint32(&words[i+1], 0x55555555)
		require.NoError(t, cudaapi.StreamWriteValue32(s, dev+cudaapi.DevicePtr(4*(i+1)), v, cudaapi.CU_STREAM_WRITE_VALUE_DEFAULT))
		require.NoError(t, cudaapi.StreamSynchronize(s))
		assert.Equal(t, v, atomic.LoadUint32(&words[i+1]), "word %d after the stream wrote it", i+1)
	}
	assert.Zero(t, atomic.LoadUint32(&words[0]), "the write lands only where it was aimed")
}
