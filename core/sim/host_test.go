package sim

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

func TestHostAllocFreePoisons(t *testing.T) {
	d := New(Config{PinnedLimit: 1000})
	b := mustPinned(t, d, 600)
	require.Len(t, b, 600)
	copy(b, fill(600, 1))
	require.Equal(t, Live{PinnedBuffers: 1, PinnedBytes: 600}, d.Live())

	_, err := d.HostAlloc(401)
	requireCode(t, cudaapi.CUDA_ERROR_OUT_OF_MEMORY, err)
	_, err = d.HostAlloc(0)
	requireCode(t, cudaapi.CUDA_ERROR_INVALID_VALUE, err)

	requireCode(t, cudaapi.CUDA_ERROR_INVALID_VALUE, d.HostFree(nil))
	requireCode(t, cudaapi.CUDA_ERROR_INVALID_VALUE, d.HostFree(unsafe.Pointer(&b[1])))
	other := make([]byte, 8)
	requireCode(t, cudaapi.CUDA_ERROR_INVALID_VALUE, d.HostFree(ptrOf(other)))
	require.Equal(t, fill(600, 1), b, "refused frees leave the buffer alone")

	require.NoError(t, d.HostFree(ptrOf(b)))
	require.Equal(t, fill(600, PoisonByte), b, "freed pinned memory is poisoned")
	requireCode(t, cudaapi.CUDA_ERROR_INVALID_VALUE, d.HostFree(ptrOf(b)))
	RequireNoLeaks(t, d)
}

func TestHostRegister(t *testing.T) {
	d := New(Config{})
	mem := make([]byte, 4096)
	pinned := mustPinned(t, d, 64)
	require.NoError(t, d.HostRegister(unsafe.Pointer(&mem[1024]), 1024))
	require.Equal(t, 1, d.Live().RegisteredRanges)

	bad := []struct {
		name string
		p    unsafe.Pointer
		n    uint64
		code cudaapi.Result
	}{
		{"nil", nil, 8, cudaapi.CUDA_ERROR_INVALID_VALUE},
		{"zero length", ptrOf(mem), 0, cudaapi.CUDA_ERROR_INVALID_VALUE},
		{"wraps", ptrOf(mem), ^uint64(0), cudaapi.CUDA_ERROR_INVALID_VALUE},
		{"same range", unsafe.Pointer(&mem[1024]), 1024, cudaapi.CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED},
		{"overlaps start", unsafe.Pointer(&mem[1000]), 100, cudaapi.CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED},
		{"overlaps end", unsafe.Pointer(&mem[2000]), 100, cudaapi.CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED},
		{"inside", unsafe.Pointer(&mem[1500]), 10, cudaapi.CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED},
		{"covers", ptrOf(mem), 4096, cudaapi.CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED},
		{"pinned buffer", ptrOf(pinned), 64, cudaapi.CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			before := d.Live()
			requireCode(t, tt.code, d.HostRegister(tt.p, tt.n))
			require.Equal(t, before, d.Live())
		})
	}
	// Adjacent ranges do not overlap.
	require.NoError(t, d.HostRegister(ptrOf(mem), 1024))
	require.NoError(t, d.HostRegister(unsafe.Pointer(&mem[2048]), 2048))

	requireCode(t, cudaapi.CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, d.HostUnregister(nil))
	requireCode(t, cudaapi.CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, d.HostUnregister(unsafe.Pointer(&mem[1025])))
	require.Equal(t, 3, d.Live().RegisteredRanges)
	for _, off := range []int{0, 1024, 2048} {
		require.NoError(t, d.HostUnregister(unsafe.Pointer(&mem[off])))
	}
	requireCode(t, cudaapi.CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, d.HostUnregister(ptrOf(mem)))
	require.NoError(t, d.HostFree(ptrOf(pinned)))
	RequireNoLeaks(t, d)
}

func TestAsyncCopiesNeedPinnedHostMemory(t *testing.T) {
	d := New(Config{})
	p := mustAlloc(t, d, 256)
	s := mustStream(t, d)
	pinned := mustPinned(t, d, 128)
	mem := make([]byte, 256)
	require.NoError(t, d.HostRegister(unsafe.Pointer(&mem[64]), 128))

	good := [][]byte{pinned, pinned[10:20], mem[64:192], mem[100:101]}
	for _, b := range good {
		require.NoError(t, d.MemcpyHtoDAsync(p, b, s))
		require.NoError(t, d.MemcpyDtoHAsync(b, p, s))
	}
	require.NoError(t, d.StreamSynchronize(s))

	bad := [][]byte{make([]byte, 16), mem[0:64], mem[63:65], mem[191:193], append(pinned[:0:0], pinned...)}
	for i, b := range bad {
		before := d.Live()
		requireCode(t, cudaapi.CUDA_ERROR_INVALID_VALUE, d.MemcpyHtoDAsync(p, b, s))
		requireCode(t, cudaapi.CUDA_ERROR_INVALID_VALUE, d.MemcpyDtoHAsync(b, p, s))
		require.Equal(t, before, d.Live(), "case %d queued nothing", i)
	}

	// AllowPageable lifts the check.
	pd := New(Config{AllowPageable: true})
	pp := mustAlloc(t, pd, 16)
	ps := mustStream(t, pd)
	src := fill(16, 3)
	require.NoError(t, pd.MemcpyHtoDAsync(pp, src, ps))
	dst := make([]byte, 16)
	require.NoError(t, pd.MemcpyDtoHAsync(dst, pp, ps))
	require.NoError(t, pd.StreamSynchronize(ps))
	require.Equal(t, src, dst)

	require.NoError(t, pd.StreamDestroy(ps))
	require.NoError(t, pd.MemFree(pp))
	RequireNoLeaks(t, pd)
	require.NoError(t, d.StreamDestroy(s))
	require.NoError(t, d.HostUnregister(unsafe.Pointer(&mem[64])))
	require.NoError(t, d.HostFree(ptrOf(pinned)))
	require.NoError(t, d.MemFree(p))
	RequireNoLeaks(t, d)
}
