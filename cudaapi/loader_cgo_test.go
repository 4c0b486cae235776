//go:build cgo

package cudaapi

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// aliasLibrary serves driver symbol names from another library's functions,
// so the generated trampolines can be exercised without a GPU.
type aliasLibrary struct {
	lib   library
	alias map[string]string
}

func (a aliasLibrary) Lookup(name string) (uintptr, error) {
	if real, ok := a.alias[name]; ok {
		return a.lib.Lookup(real)
	}
	return a.lib.Lookup(name)
}

func TestLoaderCallsThroughTrampoline(t *testing.T) {
	libc, err := dlopen("libc.so.6")
	require.NoError(t, err)
	// cuInit(unsigned int) returns int; libc's abs(int) returns its argument
	// for small values, so the driver's status is whatever flags we pass.
	useFake(t, aliasLibrary{lib: libc, alias: map[string]string{"cuInit": "abs"}}, nil)

	require.NoError(t, Init(0), "status 0 is success")
	err = Init(2)
	require.ErrorIs(t, err, CUDA_ERROR_OUT_OF_MEMORY)
	var r Result
	require.True(t, errors.As(err, &r))
	assert.Equal(t, CUDA_ERROR_OUT_OF_MEMORY, r)
	// Loaded, but this library has no cuGetErrorString: the name alone.
	assert.Equal(t, "CUDA_ERROR_OUT_OF_MEMORY", err.Error())

	// Every other entry point is missing from libc, by its versioned name.
	_, err = MemAlloc(16)
	var ms *MissingSymbolError
	require.True(t, errors.As(err, &ms), "got %v", err)
	assert.Equal(t, "cuMemAlloc_v2", ms.Symbol)
	require.NoError(t, Init(0), "a missing symbol leaves the others working")
}

func TestLoaderEnvironmentOverride(t *testing.T) {
	path := filepath.Join(t.TempDir(), "libcuda-missing.so.1")
	t.Setenv(libraryEnv, path)
	lib, err := openDefault()
	assert.Nil(t, lib)
	require.ErrorIs(t, err, ErrDriverNotFound)
	assert.Contains(t, err.Error(), path)
	assert.Contains(t, err.Error(), "Fix:")
	_, statErr := os.Stat(path)
	assert.True(t, os.IsNotExist(statErr))
}

func TestLengthMismatchChecksBeforeDriver(t *testing.T) {
	useFake(t, nil, ErrDriverNotFound)
	err := MemcpyBatchAsync(make([]DevicePtr, 2), make([]DevicePtr, 3), make([]uint64, 2), nil, nil, 0)
	require.ErrorIs(t, err, CUDA_ERROR_INVALID_VALUE)
	assert.Contains(t, err.Error(), "len(srcs) = 3 but len(dsts) = 2")
}

func TestKernelParamsLayout(t *testing.T) {
	k, err := NewKernelParams(3)
	require.NoError(t, err)
	defer k.Free()
	require.NoError(t, k.SetDevicePtr(0, 0x1122334455667788))
	require.NoError(t, k.SetUint64(1, ^uint64(0)))
	require.NoError(t, k.SetUint32(1, 9)) // overwrites the whole slot
	require.NoError(t, k.SetFloat32(2, 1.5))
	assert.ErrorIs(t, k.SetUint32(3, 1), CUDA_ERROR_INVALID_VALUE)
	assert.ErrorIs(t, k.SetUint32(-1, 1), CUDA_ERROR_INVALID_VALUE)

	ptrs := unsafe.Slice((*unsafe.Pointer)(k.Pointer()), 3)
	slot := func(i int) []byte { return unsafe.Slice((*byte)(ptrs[i]), 8) }
	assert.Equal(t, uint64(0x1122334455667788), binary.LittleEndian.Uint64(slot(0)))
	assert.Equal(t, uint64(9), binary.LittleEndian.Uint64(slot(1)))
	assert.Equal(t, uint32(0x3fc00000), binary.LittleEndian.Uint32(slot(2)))

	k.Free()
	k.Free()
	assert.ErrorIs(t, k.SetUint32(0, 1), CUDA_ERROR_INVALID_VALUE, "use after Free is refused")
}
