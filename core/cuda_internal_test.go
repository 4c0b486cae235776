package core

import (
	"errors"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/cudaapi"
)

func TestHostRanges(t *testing.T) {
	var h hostRanges
	require.True(t, h.insert(hostRange{start: 100, end: 200}))
	require.True(t, h.insert(hostRange{start: 300, end: 400, registered: true}))
	require.True(t, h.insert(hostRange{start: 200, end: 300}), "touching ranges do not overlap")
	tests := []struct {
		name string
		p, n uintptr
		want bool
	}{
		{"whole first", 100, 100, true},
		{"inside", 150, 10, true},
		{"last byte", 399, 1, true},
		{"before all", 50, 10, false},
		{"spans two ranges", 190, 20, false},
		{"runs past the end", 350, 51, false},
		{"after all", 400, 1, false},
		{"huge length", 150, ^uintptr(0), false},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, h.contains(tc.p, tc.n), tc.name)
	}
	for _, r := range []hostRange{{start: 50, end: 101}, {start: 399, end: 500}, {start: 120, end: 130}, {start: 0, end: 1000}} {
		assert.False(t, h.insert(r), "overlapping %+v must be refused", r)
	}
	assert.Len(t, h, 3)
	i, ok := h.find(300)
	require.True(t, ok)
	assert.True(t, h[i].registered)
	_, ok = h.find(150)
	assert.False(t, ok, "only a range's first byte finds it")
	h.removeAt(i)
	assert.False(t, h.contains(350, 1))
	assert.True(t, h.contains(250, 10))
}

func TestFeatureKey(t *testing.T) {
	base := featureKey(9, 0, 13000)
	assert.Equal(t, base, featureKey(9, 0, 13000), "deterministic")
	for _, other := range []uint64{featureKey(9, 1, 13000), featureKey(8, 0, 13000), featureKey(9, 0, 12080), featureKey(90, 0, 13000)} {
		assert.NotEqual(t, base, other)
	}
}

// TestCUDADriverRefusals checks the argument refusals every method makes
// before it touches the driver or the context, and the refusals of a closed
// driver, so they hold without a GPU: the driver here is closed and has no
// context.
func TestCUDADriverRefusals(t *testing.T) {
	d := &cudaDriver{closed: true}
	buf := make([]byte, 8)
	var x byte
	tests := []struct {
		name string
		err  error
		kind Kind
		code cudaapi.Result
	}{
		{"MemAlloc 0", errOf(d.MemAlloc(0)), KindInvalidArgument, resultRefused},
		{"MemFree null", d.MemFree(0), KindInvalidArgument, resultRefused},
		{"HostAlloc 0", errOf(d.HostAlloc(0)), KindInvalidArgument, resultRefused},
		{"HostRegister nil", d.HostRegister(nil, 8), KindInvalidArgument, resultRefused},
		{"HostRegister 0 bytes", d.HostRegister(unsafe.Pointer(&x), 0), KindInvalidArgument, resultRefused},
		{"StreamDestroy null", d.StreamDestroy(0), KindInvalidArgument, resultRefused},
		{"StreamSynchronize null", d.StreamSynchronize(0), KindInvalidArgument, resultRefused},
		{"StreamQuery null", errOf(d.StreamQuery(0)), KindInvalidArgument, resultRefused},
		{"StreamWaitEvent null stream", d.StreamWaitEvent(0, 1), KindInvalidArgument, resultRefused},
		{"StreamWaitEvent null event", d.StreamWaitEvent(1, 0), KindInvalidArgument, resultRefused},
		{"EventRecord null stream", d.EventRecord(1, 0), KindInvalidArgument, resultRefused},
		{"EventRecord null event", d.EventRecord(0, 1), KindInvalidArgument, resultRefused},
		{"EventQuery null", errOf(d.EventQuery(0)), KindInvalidArgument, resultRefused},
		{"EventSynchronize null", d.EventSynchronize(0), KindInvalidArgument, resultRefused},
		{"EventDestroy null", d.EventDestroy(0), KindInvalidArgument, resultRefused},
		{"EventElapsed null", errOf(d.EventElapsed(0, 1)), KindInvalidArgument, resultRefused},
		{"HtoD null stream", d.MemcpyHtoDAsync(1, buf, 0), KindInvalidArgument, resultRefused},
		{"HtoD null pointer", d.MemcpyHtoDAsync(0, buf, 1), KindInvalidArgument, resultRefused},
		{"HtoD empty", d.MemcpyHtoDAsync(1, nil, 1), KindInvalidArgument, resultRefused},
		{"DtoH null stream", d.MemcpyDtoHAsync(buf, 1, 0), KindInvalidArgument, resultRefused},
		{"DtoD null source", d.MemcpyDtoDAsync(1, 0, 8, 1), KindInvalidArgument, resultRefused},
		{"DtoD empty", d.MemcpyDtoDAsync(1, 2, 0, 1), KindInvalidArgument, resultRefused},
		{"Memset null stream", d.MemsetD8Async(1, 0, 8, 0), KindInvalidArgument, resultRefused},
		{"ModuleLoad empty", errOf(d.ModuleLoad(nil)), KindInvalidArgument, resultRefused},
		{"ModuleUnload null", d.ModuleUnload(0), KindInvalidArgument, resultRefused},
		{"ModuleFunction null", errOf(d.ModuleFunction(0, "k")), KindInvalidArgument, resultRefused},
		{"ModuleFunction no name", errOf(d.ModuleFunction(1, "")), KindInvalidArgument, resultRefused},
		{"Launch null function", d.Launch(0, LaunchConfig{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}}, 1, nil), KindInvalidArgument, resultRefused},
		{"Launch null stream", d.Launch(1, LaunchConfig{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}}, 0, nil), KindInvalidArgument, resultRefused},
		{"Launch zero block", d.Launch(1, LaunchConfig{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 0, 1}}, 1, nil), KindInvalidArgument, resultRefused},
		{"closed: MemGetInfo", errOf3(d.MemGetInfo()), KindClosed, cudaapi.CUDA_ERROR_CONTEXT_IS_DESTROYED},
		{"closed: HostFree", d.HostFree(unsafe.Pointer(&x)), KindClosed, cudaapi.CUDA_ERROR_CONTEXT_IS_DESTROYED},
		{"closed: StreamCreate", errOf(d.StreamCreate()), KindClosed, cudaapi.CUDA_ERROR_CONTEXT_IS_DESTROYED},
		{"closed: Close", d.Close(), KindClosed, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var e *Error
			require.True(t, errors.As(tc.err, &e), "want *Error, got %v", tc.err)
			assert.Equal(t, tc.kind, e.Kind)
			if tc.code != 0 {
				var r cudaapi.Result
				require.True(t, errors.As(tc.err, &r), "the Driver contract wants a cudaapi.Result in the chain")
				assert.Equal(t, tc.code, r)
			}
			assert.NotEmpty(t, e.Fix)
		})
	}
}

func errOf[T any](_ T, err error) error { return err }

func errOf3[T, U any](_ T, _ U, err error) error { return err }
