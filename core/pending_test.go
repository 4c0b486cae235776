package core_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// vaddFixture holds a, b and out = zeros, ready for out = a + b.
type vaddFixture struct {
	b       *core.Backend
	dev     *sim.Device
	a, c, o core.Buffer
}

func newVAddFixture(t *testing.T) *vaddFixture {
	t.Helper()
	b, dev := openSim(t, sim.Config{})
	f := &vaddFixture{b: b, dev: dev}
	f.a = writtenResident(t, b, dev, u32s(1, 2, 3, 4))
	f.c = writtenResident(t, b, dev, u32s(10, 20, 30, 40))
	f.o = writtenResident(t, b, dev, make([]byte, 16))
	dev.ResetCalls()
	return f
}

// writtenResident allocates a buffer and writes data straight into the
// simulated device, so no launch resource or staging is created: the first
// dispatch of a test meets empty pools.
func writtenResident(t *testing.T, b *core.Backend, dev *sim.Device, data []byte) core.Buffer {
	t.Helper()
	h, err := b.Alloc(len(data))
	require.NoError(t, err)
	ptr, err := b.ResidentDevicePtr(h)
	require.NoError(t, err)
	require.NoError(t, dev.WriteDevice(ptr, data))
	return h
}

func (f *vaddFixture) bufs() []core.Buffer { return []core.Buffer{f.a, f.c, f.o} }

// requireReleased asserts nothing is held: no lease out, every buffer
// freeable (so none is in flight), the Backend closable.
func (f *vaddFixture) requireReleased(t *testing.T) {
	t.Helper()
	assert.Zero(t, f.b.LaunchResourceCounts().Leases, "leases out")
	for _, h := range f.bufs() {
		require.NoError(t, f.b.Free(h))
	}
	require.NoError(t, f.b.Close())
	assert.True(t, f.dev.Live().Zero(), "live after Close: %v", f.dev.Live())
}

func TestPendingIsReadyReleasesBuffers(t *testing.T) {
	f := newVAddFixture(t)
	pd, err := f.b.DispatchAsync(core.ProgramVAddU32(), f.bufs(), core.DispatchConfig{})
	require.NoError(t, err)
	require.ErrorIs(t, f.b.Free(f.o), core.ErrInFlight, "bound buffers are in flight")
	require.ErrorIs(t, f.b.Close(), core.ErrInFlight, "Backend.Close refuses while work is pending")
	for {
		ready, err := pd.IsReady()
		require.NoError(t, err)
		if ready {
			break
		}
	}
	ready, err := pd.IsReady()
	assert.True(t, ready, "stays ready")
	assert.NoError(t, err)
	assert.Equal(t, []uint32{11, 22, 33, 44}, words(deviceBytes(t, f.b, f.dev, f.o)))
	assert.Zero(t, f.dev.Calls(sim.OpStreamSynchronize)+f.dev.Calls(sim.OpEventSynchronize), "polling never blocks")
	require.NoError(t, pd.Await())
	require.NoError(t, pd.Close())
	f.requireReleased(t)
}

func TestPendingAwaitThenFreeSucceeds(t *testing.T) {
	f := newVAddFixture(t)
	pd, err := f.b.DispatchAsync(core.ProgramVAddU32(), f.bufs(), core.DispatchConfig{})
	require.NoError(t, err)
	require.ErrorIs(t, f.b.Free(f.a), core.ErrInFlight)
	require.NoError(t, pd.Await())
	assert.Equal(t, uint64(1), f.b.Telemetry().SyncPoints)
	assert.Equal(t, uint64(1), f.b.Telemetry().KernelLaunches)
	require.NoError(t, pd.Await(), "Await again reports the same outcome")
	assert.Equal(t, uint64(1), f.dev.Calls(sim.OpStreamSynchronize), "one fence")
	f.requireReleased(t)
}

func TestPendingCloseWithoutAwaitWaitsFirst(t *testing.T) {
	f := newVAddFixture(t)
	pd, err := f.b.RunAsync(core.Batch{
		Steps: []core.Step{{Program: core.ProgramVAddU32(), Bufs: f.bufs()}},
		Reads: []core.Range{{Buf: f.o, Len: 16}},
	})
	require.NoError(t, err)
	require.NoError(t, pd.Close())
	assert.Equal(t, []uint32{11, 22, 33, 44}, words(deviceBytes(t, f.b, f.dev, f.o)), "the work ran to completion")
	require.NoError(t, pd.Close(), "Close is idempotent")
	_, err = pd.AwaitInto(nil)
	require.ErrorIs(t, err, core.ErrClosed, "Close dropped the reads")
	f.requireReleased(t)
}

func TestPendingAwaitIntoDeliversReadsOnce(t *testing.T) {
	f := newVAddFixture(t)
	pd, err := f.b.RunAsync(core.Batch{
		Steps: []core.Step{{Program: core.ProgramVAddU32(), Bufs: f.bufs()}},
		Reads: []core.Range{{Buf: f.o, Offset: 4, Len: 8}, {Buf: f.a, Len: 0}, {Buf: f.o, Len: 4}},
	})
	require.NoError(t, err)

	// Ready work with reads still holds its staging: the buffers are free
	// to go, the Backend is not yet closable.
	ready, err := pd.IsReady()
	require.True(t, ready)
	require.NoError(t, err)
	require.ErrorIs(t, f.b.Close(), core.ErrInFlight)

	slot := make([]byte, 0, 64)
	dst := make([][]byte, 1, 4)
	dst[0] = slot
	out, err := pd.AwaitInto(dst)
	require.NoError(t, err)
	require.Len(t, out, 3)
	assert.Equal(t, []uint32{22, 33}, words(out[0]))
	assert.Same(t, &slot[:1][0], &out[0][0], "slot 0 reuses its capacity")
	assert.Same(t, &dst[:1][0], &out[0], "the slots reuse dst's capacity")
	assert.Empty(t, out[1])
	assert.Equal(t, []uint32{11}, words(out[2]))
	assert.Equal(t, uint64(1), f.b.Telemetry().DeviceCopies, "the two reads of out fuse into one copy")

	again, err := pd.AwaitInto(dst[:0])
	require.ErrorIs(t, err, core.ErrClosed)
	assert.Empty(t, again, "a failed AwaitInto returns dst unchanged")
	require.NoError(t, pd.Await(), "Await still reports the outcome")
	f.requireReleased(t)
}

func TestPendingWithoutReadsAwaitIntoGivesNoSlots(t *testing.T) {
	f := newVAddFixture(t)
	pd, err := f.b.DispatchAsync(core.ProgramVAddU32(), f.bufs(), core.DispatchConfig{})
	require.NoError(t, err)
	out, err := pd.AwaitInto(make([][]byte, 3))
	require.NoError(t, err)
	assert.Empty(t, out)
	f.requireReleased(t)
}

func TestPendingDeviceTime(t *testing.T) {
	f := newVAddFixture(t)
	pd, err := f.b.DispatchAsync(core.ProgramVAddU32(), f.bufs(), core.DispatchConfig{Timing: true})
	require.NoError(t, err)
	_, err = pd.DeviceTime()
	require.ErrorIs(t, err, core.ErrInvalidArgument, "not finished yet")
	require.NoError(t, pd.Await())
	d, err := pd.DeviceTime()
	require.NoError(t, err)
	assert.Equal(t, sim.LaunchOverhead+sim.EventOverhead, d, "the simulated clock charges one launch and the end record between the timing events")
	assert.Equal(t, 2, f.b.LaunchResourceCounts().TimingEvents.Idle, "both timing events went back")

	pd, err = f.b.DispatchAsync(core.ProgramVAddU32(), f.bufs(), core.DispatchConfig{})
	require.NoError(t, err)
	require.NoError(t, pd.Await())
	_, err = pd.DeviceTime()
	require.ErrorIs(t, err, core.ErrInvalidArgument, "timing was not asked for")
	f.requireReleased(t)
}

func TestPendingFailurePathsReleaseEverything(t *testing.T) {
	const bad = cudaapi.CUDA_ERROR_UNKNOWN
	type surface int
	const (
		atEnqueue surface = iota
		atAwait
		atReady
	)
	tests := []struct {
		name   string
		arm    func(d *sim.Device)
		where  surface
		detail string
	}{
		{"module load fails", func(d *sim.Device) { d.FailNth(sim.OpModuleLoad, 1, bad) }, atEnqueue, "ModuleLoad"},
		{"module load null", func(d *sim.Device) { d.NullNth(sim.OpModuleLoad, 1) }, atEnqueue, "ModuleLoad returned success with a null"},
		{"function lookup null", func(d *sim.Device) { d.NullNth(sim.OpModuleFunction, 1) }, atEnqueue, "ModuleFunction returned success with a null"},
		{"binding the twin fails", func(d *sim.Device) { d.FailNth(sim.OpBindHostKernel, 1, bad) }, atEnqueue, "BindHostKernel"},
		{"staging allocation fails", func(d *sim.Device) { d.FailNth(sim.OpHostAlloc, 1, cudaapi.CUDA_ERROR_OUT_OF_MEMORY) }, atEnqueue, "HostAlloc"},
		{"second staging allocation fails", func(d *sim.Device) { d.FailNth(sim.OpHostAlloc, 2, cudaapi.CUDA_ERROR_OUT_OF_MEMORY) }, atEnqueue, "HostAlloc"},
		{"stream create fails", func(d *sim.Device) { d.FailNth(sim.OpStreamCreate, 1, bad) }, atEnqueue, "StreamCreate"},
		{"stream create null", func(d *sim.Device) { d.NullNth(sim.OpStreamCreate, 1) }, atEnqueue, "StreamCreate returned success with a null"},
		{"timing event create fails", func(d *sim.Device) { d.FailNth(sim.OpEventCreate, 2, bad) }, atEnqueue, "EventCreate"},
		{"event create null", func(d *sim.Device) { d.NullNth(sim.OpEventCreate, 1) }, atEnqueue, "EventCreate returned success with a null"},
		{"memset fails", func(d *sim.Device) { d.FailNth(sim.OpMemsetD8Async, 2, bad) }, atEnqueue, "MemsetD8Async"},
		{"upload copy fails", func(d *sim.Device) { d.FailNth(sim.OpMemcpyHtoDAsync, 1, bad) }, atEnqueue, "MemcpyHtoDAsync"},
		{"start timing record fails", func(d *sim.Device) { d.FailNth(sim.OpEventRecord, 1, bad) }, atEnqueue, "EventRecord"},
		{"second launch fails", func(d *sim.Device) { d.FailNth(sim.OpLaunch, 2, bad) }, atEnqueue, "step 1"},
		{"end timing record fails", func(d *sim.Device) { d.FailNth(sim.OpEventRecord, 2, bad) }, atEnqueue, "EventRecord"},
		{"read copy fails", func(d *sim.Device) { d.FailNth(sim.OpMemcpyDtoHAsync, 1, bad) }, atEnqueue, "MemcpyDtoHAsync"},
		{"completion record fails", func(d *sim.Device) { d.FailNth(sim.OpEventRecord, 3, bad) }, atEnqueue, "EventRecord"},
		{"fence fails", func(d *sim.Device) { d.FailNth(sim.OpStreamSynchronize, 1, bad) }, atAwait, "StreamSynchronize"},
		{"ready query fails", func(d *sim.Device) { d.FailNth(sim.OpEventQuery, 1, bad) }, atReady, "EventQuery"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newVAddFixture(t)
			batch := core.Batch{
				Clears:  []core.Buffer{f.o},
				Fills:   []core.Fill{{Buf: f.o, Value: 1}},
				Uploads: []core.UploadAt{{Buf: f.a, Offset: 4, Data: u32s(7)}},
				Steps: []core.Step{
					{Program: core.ProgramVAddU32(), Bufs: f.bufs(), Config: core.DispatchConfig{Timing: true}},
					{Program: core.ProgramVAddU32(), Bufs: []core.Buffer{f.o, f.c, f.o}},
				},
				Reads: []core.Range{{Buf: f.o, Len: 16}},
			}
			tt.arm(f.dev)
			pd, err := f.b.RunAsync(batch)
			switch tt.where {
			case atEnqueue:
				require.Error(t, err)
				assert.Nil(t, pd)
			case atAwait:
				require.NoError(t, err)
				_, err = pd.AwaitInto(nil)
				require.Error(t, err)
				sameFailure(t, err, pd.Await(), "Pending.Await")
			case atReady:
				require.NoError(t, err)
				var ready bool
				ready, err = pd.IsReady()
				assert.True(t, ready, "failed work counts as finished")
				require.Error(t, err)
				sameFailure(t, err, pd.Await(), "Pending.Await")
			}
			require.ErrorIs(t, err, core.ErrDriver)
			assert.Contains(t, err.Error(), tt.detail)
			var ce *core.Error
			require.True(t, errors.As(err, &ce))
			if pd != nil {
				_, terr := pd.DeviceTime()
				assert.Error(t, terr, "no device time for failed work")
				require.NoError(t, pd.Close(), "Close of settled work has nothing to wait for")
			}
			assert.Zero(t, f.b.LaunchResourceCounts().Leases)

			// The Backend still works once the fault is gone.
			f.dev.ClearFaults()
			out, err := f.b.Run(batch, nil)
			require.NoError(t, err)
			assert.Equal(t, []uint32{1 + 10 + 10, 7 + 20 + 20, 3 + 30 + 30, 4 + 40 + 40}, words(out[0]))
			f.requireReleased(t)
		})
	}
}

func TestPendingKernelErrorSurfacesAtTheFence(t *testing.T) {
	f := newVAddFixture(t)
	failing, err := core.NewProgram(core.ProgramSpec{Name: "boom", Image: []byte(".entry boom ()"), Entry: "boom",
		Grid: core.GridRule{Blocks: 1}, Buffers: 1,
		Host: func(core.KernelMemory, core.LaunchConfig, []core.KernelArg) error { return errors.New("boom") }})
	require.NoError(t, err)
	pd, err := f.b.RunAsync(core.Batch{Steps: []core.Step{{Program: failing, Bufs: []core.Buffer{f.o}}}})
	require.NoError(t, err)
	err = pd.Await()
	require.ErrorIs(t, err, core.ErrDriver)
	var ce *core.Error
	require.True(t, errors.As(err, &ce))
	assert.Equal(t, cudaapi.CUDA_ERROR_LAUNCH_FAILED, ce.Code)
	assert.Equal(t, 1, int(f.b.LaunchResourceCounts().Streams.Destroyed), "the failed stream is not reused")
	f.requireReleased(t)
}

func TestPendingConcurrentWaiters(t *testing.T) {
	f := newVAddFixture(t)
	pd, err := f.b.RunAsync(core.Batch{
		Steps: []core.Step{{Program: core.ProgramVAddU32(), Bufs: f.bufs()}},
		Reads: []core.Range{{Buf: f.o, Len: 16}},
	})
	require.NoError(t, err)
	done := make(chan error, 3)
	go func() { done <- pd.Await() }()
	go func() { _, err := pd.IsReady(); done <- err }()
	go func() { _, err := pd.AwaitInto(nil); done <- err }()
	for range 3 {
		require.NoError(t, <-done)
	}
	require.NoError(t, pd.Close())
	f.requireReleased(t)
}

// sameFailure asserts that again is the failure first reported once more,
// under the name of the method that reported it this time.
func sameFailure(t *testing.T, first, again error, op string) {
	t.Helper()
	var a, b *core.Error
	require.True(t, errors.As(first, &a))
	require.True(t, errors.As(again, &b), "the failure sticks")
	assert.Equal(t, op, b.Op)
	assert.Equal(t, a.Kind, b.Kind)
	assert.Equal(t, a.Code, b.Code)
	assert.Equal(t, a.Detail, b.Detail)
	assert.Equal(t, a.Fix, b.Fix)
}
