package core_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

func TestRunOrderClearsFillsUploadsStepsReads(t *testing.T) {
	f := newVAddFixture(t)
	// a: cleared, then word 1 uploaded; c: filled with 0x02 bytes; o = a + c,
	// then o = o + o; reads see the last step.
	out, err := f.b.Run(core.Batch{
		Clears:  []core.Buffer{f.a},
		Fills:   []core.Fill{{Buf: f.c, Value: 0x02}},
		Uploads: []core.UploadAt{{Buf: f.a, Offset: 4, Data: u32s(5)}},
		Steps: []core.Step{
			{Program: core.ProgramVAddU32(), Bufs: f.bufs()},
			{Program: core.ProgramVAddU32(), Bufs: []core.Buffer{f.o, f.o, f.o}},
		},
		Reads: []core.Range{{Buf: f.o, Len: 16}, {Buf: f.a, Len: 8}},
	}, nil)
	require.NoError(t, err)
	const c = 0x02020202
	assert.Equal(t, []uint32{2 * c, 2 * (5 + c), 2 * c, 2 * c}, words(out[0]))
	assert.Equal(t, []uint32{0, 5}, words(out[1]))
	tel := f.b.Telemetry()
	assert.Equal(t, uint64(2), tel.MemsetOps)
	assert.Equal(t, uint64(2), tel.KernelLaunches)
	assert.Equal(t, uint64(1), tel.SyncPoints)
	assert.Equal(t, uint64(4), tel.HostToDeviceBytes, "only the upload moves host bytes")
	assert.Equal(t, uint64(24), tel.DeviceToHostBytes)
	assert.Equal(t, uint64(1), f.dev.Calls(sim.OpStreamCreate), "one stream")
	f.requireReleased(t)
}

func TestRunClearsAndFillsMoveNoHostBytes(t *testing.T) {
	f := newVAddFixture(t)
	_, err := f.b.Run(core.Batch{
		Clears: []core.Buffer{f.a, f.c},
		Fills:  []core.Fill{{Buf: f.o, Value: 0xAB}, {Buf: f.a, Value: 0x01}},
	}, nil)
	require.NoError(t, err)
	tel := f.b.Telemetry()
	assert.Zero(t, tel.HostToDeviceBytes)
	assert.Zero(t, f.dev.Calls(sim.OpMemcpyHtoDAsync))
	assert.Zero(t, f.dev.Calls(sim.OpHostAlloc), "no staging")
	assert.Equal(t, uint64(4), tel.MemsetOps)
	assert.Equal(t, uint64(4), f.dev.Calls(sim.OpMemsetD8Async))
	assert.Equal(t, bytes.Repeat([]byte{0x01}, 16), deviceBytes(t, f.b, f.dev, f.a), "fills follow clears")
	assert.Equal(t, make([]byte, 16), deviceBytes(t, f.b, f.dev, f.c))
	assert.Equal(t, bytes.Repeat([]byte{0xAB}, 16), deviceBytes(t, f.b, f.dev, f.o))
	f.requireReleased(t)
}

func TestRunHundredStepsOneFence(t *testing.T) {
	f := newVAddFixture(t)
	steps := make([]core.Step, 100)
	for i := range steps {
		// o += c, one hundred times, each step depending on the last.
		steps[i] = core.Step{Program: core.ProgramVAddU32(), Bufs: []core.Buffer{f.o, f.c, f.o}}
	}
	out, err := f.b.Run(core.Batch{Steps: steps, Reads: []core.Range{{Buf: f.o, Len: 16}}}, nil)
	require.NoError(t, err)
	assert.Equal(t, []uint32{1000, 2000, 3000, 4000}, words(out[0]))
	assert.Equal(t, uint64(1), f.dev.Calls(sim.OpStreamSynchronize)+f.dev.Calls(sim.OpEventSynchronize), "one fence")
	assert.Equal(t, uint64(100), f.dev.Calls(sim.OpLaunch))
	assert.Equal(t, uint64(1), f.b.Telemetry().SyncPoints)
	assert.Equal(t, uint64(100), f.b.Telemetry().KernelLaunches)
	f.requireReleased(t)
}

func TestRunValidatesEverythingBeforeQueueing(t *testing.T) {
	f := newVAddFixture(t)
	freed, err := f.b.Alloc(16)
	require.NoError(t, err)
	require.NoError(t, f.b.Free(freed))
	short := writtenResident(t, f.b, f.dev, u32s(1))
	f.dev.ResetCalls()
	vadd := core.ProgramVAddU32()
	good := func() core.Batch {
		return core.Batch{
			Clears:  []core.Buffer{f.o},
			Fills:   []core.Fill{{Buf: f.c, Value: 3}},
			Uploads: []core.UploadAt{{Buf: f.a, Data: u32s(9)}},
			Steps:   []core.Step{{Program: vadd, Bufs: f.bufs()}, {Program: vadd, Bufs: f.bufs()}},
			Reads:   []core.Range{{Buf: f.o, Len: 16}},
		}
	}
	tests := []struct {
		name string
		edit func(b *core.Batch)
		want error
		msg  string
	}{
		{"unknown clear", func(b *core.Batch) { b.Clears = append(b.Clears, freed) }, core.ErrUnknownHandle, "clear 1: "},
		{"unknown fill", func(b *core.Batch) { b.Fills[0].Buf = freed }, core.ErrUnknownHandle, "fill 0: "},
		{"unknown upload", func(b *core.Batch) { b.Uploads[0].Buf = freed }, core.ErrUnknownHandle, "upload 0: "},
		{"upload past the end", func(b *core.Batch) { b.Uploads[0].Offset = 14 }, core.ErrInvalidArgument, "upload 0: "},
		{"negative upload offset", func(b *core.Batch) { b.Uploads[0].Offset = -1 }, core.ErrInvalidArgument, "upload 0: "},
		{"unknown step buffer", func(b *core.Batch) { b.Steps[1].Bufs = []core.Buffer{f.a, freed, f.o} }, core.ErrUnknownHandle, "step 1 buffer 1: "},
		{"drifted step buffer", func(b *core.Batch) { b.Steps[1].Bufs = []core.Buffer{f.a, f.c, {ID: f.o.ID, Len: 8}} }, core.ErrUnknownHandle, "step 1 buffer 2: "},
		{"step arity", func(b *core.Batch) { b.Steps[1].Bufs = f.bufs()[:2] }, core.ErrInvalidArgument, "step 1: "},
		{"step scalars", func(b *core.Batch) { b.Steps[0].Config.Scalars = []uint32{1} }, core.ErrInvalidArgument, "step 0: "},
		{"step input shorter than its output", func(b *core.Batch) { b.Steps[1].Bufs = []core.Buffer{f.a, short, f.o} }, core.ErrInvalidArgument, "step 1: "},
		{"nil program", func(b *core.Batch) { b.Steps[1].Program = nil }, core.ErrInvalidArgument, "step 1: "},
		{"unknown read", func(b *core.Batch) { b.Reads = append(b.Reads, core.Range{Buf: freed, Len: 1}) }, core.ErrUnknownHandle, "read 1: "},
		{"read past the end", func(b *core.Batch) { b.Reads[0].Len = 17 }, core.ErrInvalidArgument, "read 0: "},
		{"negative read length", func(b *core.Batch) { b.Reads[0].Len = -1 }, core.ErrInvalidArgument, "read 0: "},
	}
	before := [][]byte{deviceBytes(t, f.b, f.dev, f.a), deviceBytes(t, f.b, f.dev, f.c), deviceBytes(t, f.b, f.dev, f.o)}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.dev.ResetCalls()
			f.b.ResetTelemetry()
			batch := good()
			tt.edit(&batch)
			dst := [][]byte{[]byte("keep")}
			out, err := f.b.Run(batch, dst)
			require.ErrorIs(t, err, tt.want)
			assert.Contains(t, err.Error(), tt.msg)
			assert.Contains(t, err.Error(), "Fix:")
			assert.Equal(t, [][]byte{[]byte("keep")}, out, "dst comes back unchanged")
			pd, err := f.b.RunAsync(batch)
			require.ErrorIs(t, err, tt.want)
			assert.Nil(t, pd)
			for op, n := range f.dev.CallCounts() {
				assert.Zero(t, n, "%v called", op)
			}
			assert.Equal(t, core.Telemetry{}, f.b.Telemetry())
			for i, h := range f.bufs() {
				assert.Equal(t, before[i], deviceBytes(t, f.b, f.dev, h))
			}
		})
	}
	require.NoError(t, f.b.Free(short))
	f.requireReleased(t)
}

func TestRunDstFollowsTheIntoConvention(t *testing.T) {
	f := newVAddFixture(t)
	s0 := make([]byte, 0, 32)
	dst := make([][]byte, 2, 3)
	dst[0] = s0
	out, err := f.b.Run(core.Batch{Reads: []core.Range{{Buf: f.c, Len: 8}, {Buf: f.a, Offset: 12, Len: 4}}}, dst)
	require.NoError(t, err)
	require.Len(t, out, 2)
	assert.Same(t, &s0[:1][0], &out[0][0], "slot capacity reused")
	assert.Same(t, &dst[0], &out[0], "slot array reused")
	assert.Equal(t, []uint32{10, 20}, words(out[0]))
	assert.Equal(t, []uint32{4}, words(out[1]))

	// More reads than dst holds: a new slot array that keeps dst's slices.
	out2, err := f.b.Run(core.Batch{Reads: []core.Range{{Buf: f.a, Len: 4}, {Buf: f.a, Len: 4}, {Buf: f.a, Len: 4}, {Buf: f.a, Len: 4}}}, out)
	require.NoError(t, err)
	require.Len(t, out2, 4)
	assert.Same(t, &s0[:1][0], &out2[0][0])
	f.requireReleased(t)
}

func TestRunEmptyBatchTouchesNothing(t *testing.T) {
	f := newVAddFixture(t)
	dst := make([][]byte, 2)
	out, err := f.b.Run(core.Batch{}, dst)
	require.NoError(t, err)
	assert.Empty(t, out)
	out, err = f.b.Run(core.Batch{Reads: []core.Range{{Buf: f.a, Offset: 16, Len: 0}}}, nil)
	require.NoError(t, err)
	require.Len(t, out, 1)
	assert.Empty(t, out[0])
	pd, err := f.b.RunAsync(core.Batch{Uploads: []core.UploadAt{{Buf: f.a, Data: nil}}})
	require.NoError(t, err)
	ready, err := pd.IsReady()
	assert.True(t, ready)
	assert.NoError(t, err)
	for op, n := range f.dev.CallCounts() {
		assert.Zero(t, n, "%v called", op)
	}
	f.requireReleased(t)
}

func TestRunAsyncCopiesUploadDataAtOnce(t *testing.T) {
	f := newVAddFixture(t)
	data := u32s(100, 200)
	pd, err := f.b.RunAsync(core.Batch{
		Uploads: []core.UploadAt{{Buf: f.a, Offset: 8, Data: data}},
		Reads:   []core.Range{{Buf: f.a, Len: 16}},
	})
	require.NoError(t, err)
	copy(data, u32s(0, 0)) // the caller reuses its slice before the fence
	out, err := pd.AwaitInto(nil)
	require.NoError(t, err)
	assert.Equal(t, []uint32{1, 2, 100, 200}, words(out[0]))
	f.requireReleased(t)
}

func TestRunUploadsOverlapInOrder(t *testing.T) {
	f := newVAddFixture(t)
	out, err := f.b.Run(core.Batch{
		Uploads: []core.UploadAt{{Buf: f.a, Data: u32s(7, 7, 7, 7)}, {Buf: f.a, Offset: 4, Data: u32s(8)}},
		Reads:   []core.Range{{Buf: f.a, Len: 16}},
	}, nil)
	require.NoError(t, err)
	assert.Equal(t, []uint32{7, 8, 7, 7}, words(out[0]))
	assert.Equal(t, uint64(16), f.b.Telemetry().HostToDeviceBytes, "fused: overwritten bytes are not sent twice")
	f.requireReleased(t)
}

func TestRunConcurrentBatches(t *testing.T) {
	b, _ := openSim(t, sim.Config{})
	const workers = 6
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			h, err := b.Alloc(64)
			if err != nil {
				errs <- err
				return
			}
			for i := range 20 {
				out, err := b.Run(core.Batch{
					Fills: []core.Fill{{Buf: h, Value: byte(w)}},
					Steps: []core.Step{{Program: core.ProgramFillU32(), Bufs: []core.Buffer{h}, Config: core.DispatchConfig{Scalars: []uint32{uint32(w*100 + i)}}}},
					Reads: []core.Range{{Buf: h, Offset: 60, Len: 4}},
				}, nil)
				if err != nil {
					errs <- err
					return
				}
				if got := words(out[0])[0]; got != uint32(w*100+i) {
					errs <- assert.AnError
					return
				}
			}
			errs <- b.Free(h)
		}()
	}
	for range workers {
		require.NoError(t, <-errs)
	}
}

// BenchmarkSimW5DependentLaunches is W5 on the simulated device: 100
// dependent tiny launches and one fence. It measures the Backend's own
// per-launch overhead (validation, pinning, argument packing) plus sim's.
func BenchmarkSimW5DependentLaunches(b *testing.B) {
	be, _ := openSim(b, sim.Config{})
	h, err := be.Alloc(4)
	require.NoError(b, err)
	steps := make([]core.Step, 100)
	for i := range steps {
		steps[i] = core.Step{Program: core.ProgramVAddU32(), Bufs: []core.Buffer{h, h, h}}
	}
	batch := core.Batch{Steps: steps}
	_, err = be.Run(batch, nil) // load the module outside the timing
	require.NoError(b, err)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := be.Run(batch, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/100/1000, "us/launch")
}

func TestRunMixesPrograms(t *testing.T) {
	f := newVAddFixture(t)
	out, err := f.b.Run(core.Batch{
		Steps: []core.Step{
			{Program: core.ProgramFillU32(), Bufs: []core.Buffer{f.o}, Config: core.DispatchConfig{Scalars: []uint32{5}}},
			{Program: core.ProgramVAddU32(), Bufs: []core.Buffer{f.o, f.c, f.o}},
			{Program: core.ProgramCopyU32(), Bufs: []core.Buffer{f.o, f.a}},
			{Program: core.ProgramVAddU32(), Bufs: []core.Buffer{f.a, f.a, f.o}},
			{Program: core.ProgramFillU32(), Bufs: []core.Buffer{f.c}, Config: core.DispatchConfig{Scalars: []uint32{9}}},
		},
		Reads: []core.Range{{Buf: f.o, Len: 16}, {Buf: f.c, Len: 16}},
	}, nil)
	require.NoError(t, err)
	assert.Equal(t, []uint32{30, 50, 70, 90}, words(out[0]))
	assert.Equal(t, []uint32{9, 9, 9, 9}, words(out[1]))
	assert.Equal(t, uint64(3), f.dev.Calls(sim.OpModuleLoad), "one module per distinct image")
	f.requireReleased(t)
}
