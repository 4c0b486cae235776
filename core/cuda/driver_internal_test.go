package cuda

import (
	"errors"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/errs"
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
	d := &Driver{closed: true}
	buf := make([]byte, 8)
	var x byte
	tests := []struct {
		name string
		err  error
		kind errs.Kind
		code cudaapi.Result
	}{
		{"MemAlloc 0", errOf(d.MemAlloc(0)), errs.KindInvalidArgument, resultRefused},
		{"MemFree null", d.MemFree(0), errs.KindInvalidArgument, resultRefused},
		{"HostAlloc 0", errOf(d.HostAlloc(0)), errs.KindInvalidArgument, resultRefused},
		{"HostRegister nil", d.HostRegister(nil, 8), errs.KindInvalidArgument, resultRefused},
		{"HostRegister 0 bytes", d.HostRegister(unsafe.Pointer(&x), 0), errs.KindInvalidArgument, resultRefused},
		{"StreamDestroy null", d.StreamDestroy(0), errs.KindInvalidArgument, resultRefused},
		{"StreamSynchronize null", d.StreamSynchronize(0), errs.KindInvalidArgument, resultRefused},
		{"StreamQuery null", errOf(d.StreamQuery(0)), errs.KindInvalidArgument, resultRefused},
		{"StreamWaitEvent null stream", d.StreamWaitEvent(0, 1), errs.KindInvalidArgument, resultRefused},
		{"StreamWaitEvent null event", d.StreamWaitEvent(1, 0), errs.KindInvalidArgument, resultRefused},
		{"EventRecord null stream", d.EventRecord(1, 0), errs.KindInvalidArgument, resultRefused},
		{"EventRecord null event", d.EventRecord(0, 1), errs.KindInvalidArgument, resultRefused},
		{"EventQuery null", errOf(d.EventQuery(0)), errs.KindInvalidArgument, resultRefused},
		{"EventSynchronize null", d.EventSynchronize(0), errs.KindInvalidArgument, resultRefused},
		{"EventDestroy null", d.EventDestroy(0), errs.KindInvalidArgument, resultRefused},
		{"EventElapsed null", errOf(d.EventElapsed(0, 1)), errs.KindInvalidArgument, resultRefused},
		{"HtoD null stream", d.MemcpyHtoDAsync(1, buf, 0), errs.KindInvalidArgument, resultRefused},
		{"HtoD null pointer", d.MemcpyHtoDAsync(0, buf, 1), errs.KindInvalidArgument, resultRefused},
		{"HtoD empty", d.MemcpyHtoDAsync(1, nil, 1), errs.KindInvalidArgument, resultRefused},
		{"DtoH null stream", d.MemcpyDtoHAsync(buf, 1, 0), errs.KindInvalidArgument, resultRefused},
		{"DtoD null source", d.MemcpyDtoDAsync(1, 0, 8, 1), errs.KindInvalidArgument, resultRefused},
		{"DtoD empty", d.MemcpyDtoDAsync(1, 2, 0, 1), errs.KindInvalidArgument, resultRefused},
		{"Memset null stream", d.MemsetD8Async(1, 0, 8, 0), errs.KindInvalidArgument, resultRefused},
		{"ModuleLoad empty", errOf(d.ModuleLoad(nil)), errs.KindInvalidArgument, resultRefused},
		{"ModuleUnload null", d.ModuleUnload(0), errs.KindInvalidArgument, resultRefused},
		{"ModuleFunction null", errOf(d.ModuleFunction(0, "k")), errs.KindInvalidArgument, resultRefused},
		{"ModuleFunction no name", errOf(d.ModuleFunction(1, "")), errs.KindInvalidArgument, resultRefused},
		{"Launch null function", d.Launch(0, driver.LaunchConfig{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}}, 1, nil), errs.KindInvalidArgument, resultRefused},
		{"Launch null stream", d.Launch(1, driver.LaunchConfig{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}}, 0, nil), errs.KindInvalidArgument, resultRefused},
		{"Launch zero block", d.Launch(1, driver.LaunchConfig{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 0, 1}}, 1, nil), errs.KindInvalidArgument, resultRefused},
		{"closed: MemGetInfo", errOf3(d.MemGetInfo()), errs.KindClosed, cudaapi.CUDA_ERROR_CONTEXT_IS_DESTROYED},
		{"closed: HostFree", d.HostFree(unsafe.Pointer(&x)), errs.KindClosed, cudaapi.CUDA_ERROR_CONTEXT_IS_DESTROYED},
		{"closed: StreamCreate", errOf(d.StreamCreate()), errs.KindClosed, cudaapi.CUDA_ERROR_CONTEXT_IS_DESTROYED},
		{"PeerAttributes same device", errOf(d.PeerAttributes(d)), errs.KindInvalidArgument, resultRefused},
		{"PeerAttributes foreign peer", errOf(d.PeerAttributes(nil)), errs.KindInvalidArgument, resultRefused},
		{"closed: PeerAttributes", errOf(d.PeerAttributes(&Driver{dev: 1})), errs.KindClosed, cudaapi.CUDA_ERROR_CONTEXT_IS_DESTROYED},
		{"closed: Close", d.Close(), errs.KindClosed, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var e *errs.Error
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

// TestNilDriverRefuses: every call on a nil *Driver, with arguments that
// pass the checks before the driver is reached, fails with an *errs.Error
// carrying a cudaapi.Result instead of panicking.
func TestNilDriverRefuses(t *testing.T) {
	var d *Driver
	other := &Driver{closed: true}
	var x byte
	buf := make([]byte, 8)
	one := driver.LaunchConfig{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}}
	calls := map[string]func() error{
		"Info":               func() error { return errOf(d.Info()) },
		"MemGetInfo":         func() error { return errOf3(d.MemGetInfo()) },
		"MemAlloc":           func() error { return errOf(d.MemAlloc(8)) },
		"MemFree":            func() error { return d.MemFree(1) },
		"HostAlloc":          func() error { return errOf(d.HostAlloc(8)) },
		"HostFree":           func() error { return d.HostFree(unsafe.Pointer(&x)) },
		"HostRegister":       func() error { return d.HostRegister(unsafe.Pointer(&x), 1) },
		"HostUnregister":     func() error { return d.HostUnregister(unsafe.Pointer(&x)) },
		"StreamCreate":       func() error { return errOf(d.StreamCreate()) },
		"StreamDestroy":      func() error { return d.StreamDestroy(1) },
		"StreamSynchronize":  func() error { return d.StreamSynchronize(1) },
		"StreamQuery":        func() error { return errOf(d.StreamQuery(1)) },
		"StreamWaitEvent":    func() error { return d.StreamWaitEvent(1, 1) },
		"EventCreate":        func() error { return errOf(d.EventCreate(false)) },
		"EventRecord":        func() error { return d.EventRecord(1, 1) },
		"EventQuery":         func() error { return errOf(d.EventQuery(1)) },
		"EventSynchronize":   func() error { return d.EventSynchronize(1) },
		"EventDestroy":       func() error { return d.EventDestroy(1) },
		"EventElapsed":       func() error { return errOf(d.EventElapsed(1, 2)) },
		"MemcpyHtoDAsync":    func() error { return d.MemcpyHtoDAsync(1, buf, 1) },
		"MemcpyDtoHAsync":    func() error { return d.MemcpyDtoHAsync(buf, 1, 1) },
		"MemcpyDtoDAsync":    func() error { return d.MemcpyDtoDAsync(1, 2, 8, 1) },
		"MemsetD8Async":      func() error { return d.MemsetD8Async(1, 0, 8, 1) },
		"MemcpyHtoD":         func() error { return d.MemcpyHtoD(1, buf) },
		"MemcpyDtoH":         func() error { return d.MemcpyDtoH(buf, 1) },
		"ModuleLoad":         func() error { return errOf(d.ModuleLoad([]byte("ptx"))) },
		"ModuleUnload":       func() error { return d.ModuleUnload(1) },
		"ModuleFunction":     func() error { return errOf(d.ModuleFunction(1, "k")) },
		"Launch":             func() error { return d.Launch(1, one, 1, nil) },
		"LaunchBatch":        func() error { return errOf(d.LaunchBatch(1, []driver.Launch{{F: 1, Cfg: one}})) },
		"StreamBeginCapture": func() error { return d.StreamBeginCapture(1) },
		"StreamEndCapture":   func() error { return errOf(d.StreamEndCapture(1)) },
		"GraphInstantiate":   func() error { return errOf(d.GraphInstantiate(1)) },
		"GraphLaunch":        func() error { return d.GraphLaunch(1, 1) },
		"GraphUpload":        func() error { return d.GraphUpload(1, 1) },
		"GraphExecDestroy":   func() error { return d.GraphExecDestroy(1) },
		"GraphDestroy":       func() error { return d.GraphDestroy(1) },
		"PeerLink":           func() error { return errOf(d.PeerLink(other)) },
		"PeerAttributes":     func() error { return errOf(d.PeerAttributes(other)) },
		"EnablePeerAccess":   func() error { return d.EnablePeerAccess(other) },
		"MemcpyPeerAsync":    func() error { return d.MemcpyPeerAsync(1, other, 2, 8, 1) },
		"NewCommunicators":   func() error { return errOf(d.NewCommunicators([]driver.Driver{other})) },
		"JoinCommunicator":   func() error { return errOf(d.JoinCommunicator(driver.CommID{}, 1, 0)) },
		"Close":              d.Close,
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			var err error
			require.NotPanics(t, func() { err = call() })
			var e *errs.Error
			require.True(t, errors.As(err, &e), "want *errs.Error, got %v", err)
			var r cudaapi.Result
			assert.True(t, errors.As(err, &r), "the Driver contract wants a cudaapi.Result in the chain")
			assert.NotEmpty(t, e.Fix)
		})
	}
	assert.Equal(t, driver.Capabilities{}, d.Capabilities())
}

// TestCheckedNamesTheCallAndRefusesNull: a failed call is named and keeps
// its Result; success with a zero handle is a null result; a good handle
// passes.
func TestCheckedNamesTheCallAndRefusesNull(t *testing.T) {
	v, err := checked("cuThing", func() (uintptr, error) { return 7, cudaapi.CUDA_ERROR_OUT_OF_MEMORY })
	assert.Zero(t, v, "nothing is returned with an error")
	assert.ErrorIs(t, err, cudaapi.CUDA_ERROR_OUT_OF_MEMORY)
	assert.Contains(t, err.Error(), "cuThing: ")

	_, err = checked("cuThing", func() (uintptr, error) { return 0, nil })
	var e *errs.Error
	require.True(t, errors.As(err, &e))
	assert.Equal(t, errs.KindDriver, e.Kind)
	assert.Equal(t, resultNull, e.Code)

	v, err = checked("cuThing", func() (uintptr, error) { return 42, nil })
	require.NoError(t, err)
	assert.Equal(t, uintptr(42), v)

	assert.NoError(t, callError("cuThing", nil))
}

func TestQueryResult(t *testing.T) {
	done, err := queryResult("cuStreamQuery", nil)
	assert.True(t, done)
	assert.NoError(t, err)
	done, err = queryResult("cuStreamQuery", cudaapi.CUDA_ERROR_NOT_READY)
	assert.False(t, done)
	assert.NoError(t, err, "not ready is an answer, not a failure")
	done, err = queryResult("cuStreamQuery", cudaapi.CUDA_ERROR_ILLEGAL_ADDRESS)
	assert.False(t, done)
	assert.ErrorIs(t, err, cudaapi.CUDA_ERROR_ILLEGAL_ADDRESS)
}

// TestNCCLTypesRefuseUnknownValues: a data type or reduction outside the
// constants is refused before NCCL's tables are indexed.
func TestNCCLTypesRefuseUnknownValues(t *testing.T) {
	for _, c := range []struct {
		dt driver.DataType
		op driver.ReduceOp
	}{{0, driver.ReduceSum}, {driver.DataBFloat16 + 1, driver.ReduceSum}, {driver.DataFloat32, 0}, {driver.DataFloat32, driver.ReduceAvg + 1}, {-1, -1}} {
		_, _, err := ncclTypes("ncclAllReduce", c.dt, c.op)
		assert.ErrorIs(t, err, errs.ErrInvalidArgument, "%d %d", c.dt, c.op)
	}
	dt, op, err := ncclTypes("ncclAllReduce", driver.DataFloat32, driver.ReduceMax)
	require.NoError(t, err)
	assert.Equal(t, ncclDataType[driver.DataFloat32], dt)
	assert.Equal(t, ncclRedOp[driver.ReduceMax], op)
}
