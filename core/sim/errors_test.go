package sim

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

func TestErrorMessagesCarryOpCodeAndNumbers(t *testing.T) {
	d := New(Config{TotalMemory: 1000})
	_, err := d.MemAlloc(1001)
	var se *Error
	require.True(t, errors.As(err, &se))
	require.Equal(t, OpMemAlloc, se.Op)
	require.Equal(t, cudaapi.CUDA_ERROR_OUT_OF_MEMORY, se.Code)
	require.True(t, errors.Is(err, cudaapi.CUDA_ERROR_OUT_OF_MEMORY))
	require.Equal(t, "sim: MemAlloc: CUDA_ERROR_OUT_OF_MEMORY (CUresult 2): requested 1001 bytes, 1000 free of 1000", err.Error())

	_, err = d.ReadDevice(0x42, 3)
	require.ErrorContains(t, err, "sim: ReadDevice: CUDA_ERROR_INVALID_VALUE")
	require.ErrorContains(t, err, "[0x42, +3)")
	require.ErrorContains(t, d.WriteDevice(0x42, []byte{1}), "sim: WriteDevice:")

	d.FailNth(OpStreamCreate, 1, cudaapi.CUDA_ERROR_NOT_PERMITTED)
	_, err = d.StreamCreate()
	require.ErrorContains(t, err, "StreamCreate")
	require.ErrorContains(t, err, "CUresult 800")
	require.ErrorContains(t, err, "injected fault (FailNth)")

	codes := []cudaapi.Result{
		cudaapi.CUDA_SUCCESS, cudaapi.CUDA_ERROR_INVALID_VALUE, cudaapi.CUDA_ERROR_OUT_OF_MEMORY,
		cudaapi.CUDA_ERROR_INVALID_IMAGE, cudaapi.CUDA_ERROR_INVALID_HANDLE, cudaapi.CUDA_ERROR_ILLEGAL_STATE,
		cudaapi.CUDA_ERROR_NOT_FOUND, cudaapi.CUDA_ERROR_NOT_READY, cudaapi.CUDA_ERROR_ILLEGAL_ADDRESS,
		cudaapi.CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, cudaapi.CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
		cudaapi.CUDA_ERROR_LAUNCH_FAILED, cudaapi.CUDA_ERROR_NOT_SUPPORTED, cudaapi.CUDA_ERROR_UNKNOWN,
	}
	for _, c := range codes {
		require.Contains(t, resultName(c), "CUDA_", "code %d", c)
	}
	require.Equal(t, cudaapi.CUDA_ERROR_NOT_PERMITTED.Error(), resultName(cudaapi.CUDA_ERROR_NOT_PERMITTED))
}

func TestConfigDefaults(t *testing.T) {
	c := New(Config{}).Config()
	require.Equal(t, Config{
		TotalMemory: DefaultTotalMemory, Name: DefaultName, CCMajor: 9, CCMinor: 0,
		PinnedLimit: DefaultPinnedLimit, FeatureKey: c.FeatureKey,
	}, c)
	require.NotZero(t, c.FeatureKey)
	c2 := New(Config{AllowPageable: true, AnyFunction: true, PinnedLimit: 5, TotalMemory: 7}).Config()
	require.True(t, c2.AllowPageable)
	require.True(t, c2.AnyFunction)
	require.Equal(t, uint64(5), c2.PinnedLimit)
	require.Equal(t, uint64(7), c2.TotalMemory)
}
