package sim

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// fixture holds one valid target for every operation, so each Op can be
// called in a way that succeeds when no fault is armed.
type fixture struct {
	d                   *Device
	ptr, sparePtr       uint64
	pinned, sparePinned []byte
	reg, spareReg       []byte
	s, spareStream      driver.Stream
	e, spareEvent       driver.Event
	m, spareModule      driver.Module
	f                   driver.Function
	image               []byte
	peer                *Device             // the other device of d's Machine
	comm, spareComm     driver.Communicator // one-rank communicators on d
	id                  driver.CommID
	capFresh, capActive driver.Stream      // not capturing yet; capturing
	g, spareGraph       driver.DeviceGraph // recorded graphs
	x, spareExec        driver.GraphExec   // executable graphs
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	m, err := NewMachine(MachineConfig{Devices: 2})
	require.NoError(t, err)
	d := m.Device(0)
	fx := &fixture{d: d, image: []byte(testPTX), peer: m.Device(1)}
	fx.ptr, fx.sparePtr = mustAlloc(t, d, 64), mustAlloc(t, d, 64)
	fx.pinned, fx.sparePinned = mustPinned(t, d, 64), mustPinned(t, d, 64)
	fx.reg, fx.spareReg = make([]byte, 64), make([]byte, 64)
	require.NoError(t, d.HostRegister(ptrOf(fx.spareReg), 64))
	fx.s, fx.spareStream = mustStream(t, d), mustStream(t, d)
	fx.e, fx.spareEvent = mustEvent(t, d, true), mustEvent(t, d, true)
	require.NoError(t, d.EventRecord(fx.e, fx.s))
	require.NoError(t, d.StreamSynchronize(fx.s))
	fx.m, err = d.ModuleLoad(fx.image)
	require.NoError(t, err)
	fx.spareModule, err = d.ModuleLoad(fx.image)
	require.NoError(t, err)
	fx.f, err = d.ModuleFunction(fx.m, "add_one")
	require.NoError(t, err)
	require.NoError(t, d.BindHostKernel(fx.f, addOne))
	comms, err := d.NewCommunicators([]driver.Driver{d})
	require.NoError(t, err)
	spare, err := d.NewCommunicators([]driver.Driver{d})
	require.NoError(t, err)
	fx.comm, fx.spareComm = comms[0], spare[0]
	fx.id, err = d.NewCommID()
	require.NoError(t, err)
	require.NoError(t, d.GroupStart()) // so that GroupEnd has one to end
	fx.capFresh, fx.capActive = mustStream(t, d), mustStream(t, d)
	for _, g := range []*driver.DeviceGraph{&fx.g, &fx.spareGraph} {
		require.NoError(t, d.StreamBeginCapture(fx.capActive))
		require.NoError(t, d.MemsetD8Async(fx.ptr, 7, 64, fx.capActive))
		*g, err = d.StreamEndCapture(fx.capActive)
		require.NoError(t, err)
	}
	for _, x := range []*driver.GraphExec{&fx.x, &fx.spareExec} {
		*x, err = d.GraphInstantiate(fx.g)
		require.NoError(t, err)
	}
	require.NoError(t, d.StreamBeginCapture(fx.capActive))
	d.ResetCalls()
	return fx
}

// call invokes op once with valid arguments and returns its result (nil for
// operations that return only an error).
func (fx *fixture) call(op Op) (any, error) {
	for _, group := range []func(Op) (any, bool, error){fx.callMemoryStreamEvent, fx.callCopyModulePeer, fx.callCollectiveGraph} {
		if res, ok, err := group(op); ok {
			return res, err
		}
	}
	panic("no call for " + op.String())
}

// handled passes on a call's result and error, marking the op as run.
func handled[T any](res T, err error) (any, bool, error) {
	return res, true, err
}

// callMemoryStreamEvent runs the memory, host, stream and event operations;
// ok is false when op is not one of them.
func (fx *fixture) callMemoryStreamEvent(op Op) (res any, ok bool, err error) {
	d := fx.d
	switch op {
	case OpInfo:
		return handled(d.Info())
	case OpMemGetInfo:
		free, total, err := d.MemGetInfo()
		return [2]uint64{free, total}, true, err
	case OpMemAlloc:
		return handled(d.MemAlloc(16))
	case OpMemFree:
		return nil, true, d.MemFree(fx.sparePtr)
	case OpHostAlloc:
		return handled(d.HostAlloc(16))
	case OpHostFree:
		return nil, true, d.HostFree(ptrOf(fx.sparePinned))
	case OpHostRegister:
		return nil, true, d.HostRegister(ptrOf(fx.reg), 64)
	case OpHostUnregister:
		return nil, true, d.HostUnregister(ptrOf(fx.spareReg))
	case OpStreamCreate:
		return handled(d.StreamCreate())
	case OpStreamDestroy:
		return nil, true, d.StreamDestroy(fx.spareStream)
	case OpStreamSynchronize:
		return nil, true, d.StreamSynchronize(fx.s)
	case OpStreamQuery:
		return handled(d.StreamQuery(fx.s))
	case OpStreamWaitEvent:
		return nil, true, d.StreamWaitEvent(fx.s, fx.e)
	case OpEventCreate:
		return handled(d.EventCreate(true))
	case OpEventRecord:
		return nil, true, d.EventRecord(fx.e, fx.s)
	case OpEventQuery:
		return handled(d.EventQuery(fx.e))
	case OpEventSynchronize:
		return nil, true, d.EventSynchronize(fx.e)
	case OpEventElapsed:
		return handled(d.EventElapsed(fx.e, fx.e))
	case OpEventDestroy:
		return nil, true, d.EventDestroy(fx.spareEvent)
	}
	return nil, false, nil
}

// callCopyModulePeer runs the async copy, module, launch, peer and
// communicator-setup operations; ok is false when op is not one of them.
func (fx *fixture) callCopyModulePeer(op Op) (res any, ok bool, err error) {
	d := fx.d
	switch op {
	case OpMemcpyHtoDAsync:
		return nil, true, d.MemcpyHtoDAsync(fx.ptr, fx.pinned, fx.s)
	case OpMemcpyDtoHAsync:
		return nil, true, d.MemcpyDtoHAsync(fx.pinned, fx.ptr, fx.s)
	case OpMemcpyDtoDAsync:
		return nil, true, d.MemcpyDtoDAsync(fx.ptr, fx.ptr, 64, fx.s)
	case OpMemsetD8Async:
		return nil, true, d.MemsetD8Async(fx.ptr, 1, 64, fx.s)
	case OpModuleLoad:
		return handled(d.ModuleLoad(fx.image))
	case OpModuleUnload:
		return nil, true, d.ModuleUnload(fx.spareModule)
	case OpModuleFunction:
		return handled(d.ModuleFunction(fx.m, "fill_u8"))
	case OpLaunch:
		return nil, true, d.Launch(fx.f, one, fx.s, []driver.KernelArg{{Ptr: fx.ptr, IsPtr: true}, {U32: 64}})
	case OpBindHostKernel:
		return nil, true, d.BindHostKernel(fx.f, addOne)
	case OpPeerLink:
		return handled(d.PeerLink(fx.peer))
	case OpPeerAttributes:
		return handled(d.PeerAttributes(fx.peer))
	case OpEnablePeerAccess:
		return nil, true, d.EnablePeerAccess(fx.peer)
	case OpMemcpyPeerAsync:
		return nil, true, d.MemcpyPeerAsync(fx.ptr, d, fx.sparePtr, 64, fx.s)
	case OpNewCommunicators:
		return handled(d.NewCommunicators([]driver.Driver{d}))
	case OpNewCommID:
		return handled(d.NewCommID())
	case OpJoinCommunicator:
		return handled(d.JoinCommunicator(fx.id, 1, 0))
	case OpGroupStart:
		return nil, true, d.GroupStart()
	case OpGroupEnd:
		return nil, true, d.GroupEnd()
	}
	return nil, false, nil
}

// callCollectiveGraph runs the collective, capture, graph and synchronous
// copy operations; ok is false when op is not one of them.
func (fx *fixture) callCollectiveGraph(op Op) (res any, ok bool, err error) {
	d := fx.d
	switch op {
	case OpAllReduce:
		return nil, true, fx.comm.AllReduce(fx.ptr, fx.ptr, 16, driver.DataFloat32, driver.ReduceSum, fx.s)
	case OpBroadcast:
		return nil, true, fx.comm.Broadcast(fx.ptr, fx.ptr, 16, driver.DataFloat32, 0, fx.s)
	case OpAllGather:
		return nil, true, fx.comm.AllGather(fx.ptr, fx.ptr, 16, driver.DataFloat32, fx.s)
	case OpReduceScatter:
		return nil, true, fx.comm.ReduceScatter(fx.ptr, fx.ptr, 16, driver.DataFloat32, driver.ReduceSum, fx.s)
	case OpCommDestroy:
		return nil, true, fx.spareComm.Destroy()
	case OpStreamBeginCapture:
		return nil, true, d.StreamBeginCapture(fx.capFresh)
	case OpStreamEndCapture:
		return handled(d.StreamEndCapture(fx.capActive))
	case OpGraphInstantiate:
		return handled(d.GraphInstantiate(fx.g))
	case OpGraphLaunch:
		return nil, true, d.GraphLaunch(fx.x, fx.s)
	case OpGraphExecDestroy:
		return nil, true, d.GraphExecDestroy(fx.spareExec)
	case OpGraphDestroy:
		return nil, true, d.GraphDestroy(fx.spareGraph)
	case OpMemcpyHtoD:
		return nil, true, d.MemcpyHtoD(fx.ptr, make([]byte, 64))
	case OpMemcpyDtoH:
		return nil, true, d.MemcpyDtoH(make([]byte, 64), fx.ptr)
	case OpLaunchProgrammatic:
		_, err := d.LaunchBatch(fx.s, []driver.Launch{{F: fx.f, Cfg: one,
			Args: []driver.KernelArg{{Ptr: fx.ptr, IsPtr: true}, {U32: 64}}, Programmatic: true}})
		return nil, true, err
	case OpGraphUpload:
		return nil, true, d.GraphUpload(fx.x, fx.s)
	}
	return nil, false, nil
}

// snapshot is everything a faulted call must leave alone.
type snapshot struct {
	live     Live
	device   []byte
	pinned   []byte
	modFuncs int
}

func (fx *fixture) snap(t *testing.T) snapshot {
	b, err := fx.d.ReadDevice(fx.ptr, 64)
	require.NoError(t, err)
	fx.d.mu.Lock()
	defer fx.d.mu.Unlock()
	return snapshot{live: fx.d.liveLocked(), device: b, pinned: append([]byte(nil), fx.pinned...),
		modFuncs: len(fx.d.functions)}
}

func TestFixtureCallsSucceedWithoutFaults(t *testing.T) {
	for _, op := range Ops() {
		t.Run(op.String(), func(t *testing.T) {
			fx := newFixture(t)
			_, err := fx.call(op)
			require.NoError(t, err)
			require.Equal(t, uint64(1), fx.d.Calls(op))
			want := map[Op]uint64{op: 1}
			if op == OpLaunchProgrammatic {
				want[OpLaunch] = 1 // a programmatic launch is a launch
			}
			require.Equal(t, want, fx.d.CallCounts())
		})
	}
}

func TestFailNthEveryOp(t *testing.T) {
	codes := []cudaapi.Result{cudaapi.CUDA_ERROR_OUT_OF_MEMORY, cudaapi.CUDA_ERROR_LAUNCH_FAILED}
	for _, op := range Ops() {
		for _, code := range codes {
			t.Run(fmt.Sprintf("%s/%d", op, code), func(t *testing.T) {
				fx := newFixture(t)
				fx.d.FailNth(op, 1, code)
				before := fx.snap(t)
				res, err := fx.call(op)
				requireCode(t, code, err)
				if res != nil {
					require.True(t, reflect.ValueOf(res).IsZero(), "a failed %s returned %v", op, res)
				}
				require.Equal(t, before, fx.snap(t), "a faulted %s changed state", op)
				_, err = fx.call(op)
				require.NoError(t, err, "the fault fires once")
				require.Equal(t, uint64(2), fx.d.Calls(op))
			})
		}
	}
}

func TestNullNthEveryOp(t *testing.T) {
	for _, op := range Ops() {
		t.Run(op.String(), func(t *testing.T) {
			fx := newFixture(t)
			fx.d.NullNth(op, 1)
			before := fx.snap(t)
			res, err := fx.call(op)
			require.NoError(t, err)
			if res != nil {
				require.True(t, reflect.ValueOf(res).IsZero(), "a null %s returned %v", op, res)
			}
			require.Equal(t, before, fx.snap(t), "a null %s kept state", op)
		})
	}
}

func TestFailNthCountsFromArming(t *testing.T) {
	d := New(Config{})
	p := mustAlloc(t, d, 1) // calls before arming do not count
	d.FailNth(OpMemAlloc, 3, cudaapi.CUDA_ERROR_OUT_OF_MEMORY)
	d.FailNth(OpMemAlloc, 3, cudaapi.CUDA_ERROR_UNKNOWN) // same call: the first armed wins
	d.NullNth(OpMemAlloc, 4)
	var ptrs []uint64
	for range 2 {
		ptrs = append(ptrs, mustAlloc(t, d, 1))
	}
	_, err := d.MemAlloc(1)
	requireCode(t, cudaapi.CUDA_ERROR_OUT_OF_MEMORY, err)
	q, err := d.MemAlloc(1)
	require.NoError(t, err)
	require.Zero(t, q)
	ptrs = append(ptrs, mustAlloc(t, d, 1), p)
	require.Equal(t, uint64(6), d.Calls(OpMemAlloc))
	require.Equal(t, 4, d.Live().Allocations)
	for _, p := range ptrs {
		require.NoError(t, d.MemFree(p))
	}

	// Arguments that arm nothing.
	d.FailNth(OpMemAlloc, 0, cudaapi.CUDA_ERROR_UNKNOWN)
	d.FailNth(OpMemAlloc, 1, cudaapi.CUDA_SUCCESS)
	d.FailNth(Op(-1), 1, cudaapi.CUDA_ERROR_UNKNOWN)
	d.FailNth(numOps, 1, cudaapi.CUDA_ERROR_UNKNOWN)
	d.NullNth(OpMemAlloc, -1)
	d.NullNth(Op(99), 1)
	p = mustAlloc(t, d, 1)
	require.NotZero(t, p)
	require.NoError(t, d.MemFree(p))

	d.FailNth(OpMemFree, 1, cudaapi.CUDA_ERROR_UNKNOWN)
	d.ClearFaults()
	p = mustAlloc(t, d, 1)
	require.NoError(t, d.MemFree(p))
	RequireNoLeaks(t, d)
}

func TestFailRate(t *testing.T) {
	pattern := func(seed int64, rate float64, ops ...Op) []bool {
		d := New(Config{})
		d.FailRate(seed, rate, ops...)
		var failed []bool
		for range 200 {
			_, err := d.MemAlloc(1)
			if err != nil {
				requireCode(t, cudaapi.CUDA_ERROR_UNKNOWN, err)
			}
			failed = append(failed, err != nil)
		}
		return failed
	}
	count := func(b []bool) (n int) {
		for _, v := range b {
			if v {
				n++
			}
		}
		return n
	}
	a, b := pattern(7, 0.5, OpMemAlloc), pattern(7, 0.5, OpMemAlloc)
	require.Equal(t, a, b, "the same seed fails the same calls")
	require.Zero(t, count(pattern(7, 0)))
	require.Equal(t, 200, count(pattern(7, 1.5)))
	require.Zero(t, count(pattern(7, 1, OpMemFree)), "only the named ops fail")
	require.Equal(t, 200, count(pattern(7, 1)), "no ops named: every op")

	d := New(Config{})
	d.FailRateWith(1, 0.5, cudaapi.CUDA_ERROR_NOT_PERMITTED, OpStreamCreate)
	var fails, oks int
	var streams []driver.Stream
	for range 400 {
		s, err := d.StreamCreate()
		if err != nil {
			requireCode(t, cudaapi.CUDA_ERROR_NOT_PERMITTED, err)
			require.Zero(t, s)
			fails++
			continue
		}
		oks++
		streams = append(streams, s)
	}
	require.InDelta(t, 200, fails, 60, "rate 0.5 fails about half")
	require.Equal(t, oks, d.Live().Streams, "failed creates leave nothing behind")
	d.ClearFaults()
	for _, s := range streams {
		require.NoError(t, d.StreamDestroy(s))
	}
	RequireNoLeaks(t, d)
}

func TestFailRateSequenceIsSeeded(t *testing.T) {
	run := func(seed int64) []bool {
		d := New(Config{})
		d.FailRate(seed, 0.3, OpStreamCreate)
		var got []bool
		for range 100 {
			s, err := d.StreamCreate()
			got = append(got, err != nil)
			if err == nil {
				require.NoError(t, d.StreamDestroy(s))
			}
		}
		return got
	}
	require.Equal(t, run(42), run(42))
	require.NotEqual(t, run(42), run(43))
}

func TestCallCounters(t *testing.T) {
	d := New(Config{})
	require.Empty(t, d.CallCounts())
	p := mustAlloc(t, d, 8)
	_, err := d.MemAlloc(0) // failed calls count too
	require.Error(t, err)
	require.NoError(t, d.MemFree(p))
	require.Equal(t, uint64(2), d.Calls(OpMemAlloc))
	require.Equal(t, uint64(1), d.Calls(OpMemFree))
	require.Zero(t, d.Calls(Op(-3)))
	require.Equal(t, map[Op]uint64{OpMemAlloc: 2, OpMemFree: 1}, d.CallCounts())
	d.ResetCalls()
	require.Empty(t, d.CallCounts())
	_, err = d.ReadDevice(p, 0) // helpers are not counted
	require.Error(t, err)
	require.Empty(t, d.CallCounts())
}

func TestOpString(t *testing.T) {
	seen := map[string]bool{}
	for _, op := range Ops() {
		s := op.String()
		require.NotEmpty(t, s)
		require.False(t, seen[s], "duplicate name %s", s)
		seen[s] = true
		// Every Op names a method of Device or of its communicators
		// (CommDestroy stands for Communicator.Destroy and Abort), except
		// LaunchProgrammatic: a launch of LaunchBatch with Programmatic set.
		if op == OpLaunchProgrammatic {
			_, ok := reflect.TypeOf(&Device{}).MethodByName("LaunchBatch")
			require.True(t, ok)
			continue
		}
		_, ok := reflect.TypeOf(&Device{}).MethodByName(s)
		if !ok {
			name := strings.TrimPrefix(s, "Comm")
			_, ok = reflect.TypeOf((*driver.Communicator)(nil)).Elem().MethodByName(name)
		}
		require.True(t, ok, "Op %s names no Device or Communicator method", s)
	}
	methods := 0
	// InlineCopier's MemcpyHtoDInline counts and fails as MemcpyHtoDAsync.
	for _, i := range []any{(*driver.Driver)(nil), (*driver.GraphDriver)(nil), (*driver.PeerDriver)(nil), (*driver.CollectiveDriver)(nil), (*driver.PageableCopier)(nil), (*driver.GraphUploader)(nil), (*driver.PeerAttributeReporter)(nil)} {
		methods += reflect.TypeOf(i).Elem().NumMethod()
	}
	collectives := 5 // AllReduce, Broadcast, AllGather, ReduceScatter, Destroy (Abort counts as CommDestroy)
	require.Len(t, Ops(), methods+2+collectives,
		"one Op per Driver, GraphDriver, PeerDriver, CollectiveDriver, PageableCopier, GraphUploader and PeerAttributeReporter method, BindHostKernel, programmatic launches and the communicator calls")
	require.Equal(t, "Op(-1)", Op(-1).String())
	require.Equal(t, "Op(1000)", Op(1000).String())
}
