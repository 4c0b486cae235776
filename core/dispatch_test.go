package core_test

import (
	"encoding/binary"
	"math/rand"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/kernels"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// u32s encodes words little-endian.
func u32s(words ...uint32) []byte {
	out := make([]byte, 4*len(words))
	for i, w := range words {
		binary.LittleEndian.PutUint32(out[4*i:], w)
	}
	return out
}

// words decodes little-endian u32 words.
func words(b []byte) []uint32 {
	out := make([]uint32, len(b)/4)
	for i := range out {
		out[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return out
}

// residentWith allocates a buffer holding data.
func residentWith(t testing.TB, b *core.Backend, data []byte) core.Buffer {
	t.Helper()
	h, err := b.Alloc(len(data))
	require.NoError(t, err)
	require.NoError(t, b.Upload(core.UploadAt{Buf: h, Data: data}))
	return h
}

// deviceBytes reads a buffer straight from the simulated device, moving no
// Backend counters.
func deviceBytes(t testing.TB, b *core.Backend, dev *sim.Device, h core.Buffer) []byte {
	t.Helper()
	ptr, err := b.ResidentDevicePtr(h)
	require.NoError(t, err)
	got, err := dev.ReadDevice(ptr, h.Len)
	require.NoError(t, err)
	return got
}

// recorder is a Go twin that records the launches it sees.
type recorder struct {
	mu   sync.Mutex
	cfgs []core.LaunchConfig
	args [][]core.KernelArg
}

func (r *recorder) kernel(_ core.KernelMemory, cfg core.LaunchConfig, args []core.KernelArg) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cfgs = append(r.cfgs, cfg)
	r.args = append(r.args, append([]core.KernelArg(nil), args...))
	return nil
}

// recordingSpec is a valid spec over the fill kernel's image whose twin
// records its launches instead of computing.
func recordingSpec(r *recorder) core.ProgramSpec {
	return core.ProgramSpec{Name: "rec", Image: kernels.FillPTX, Entry: kernels.FillEntry,
		Block: 128, Grid: core.GridRule{FromBuffer: 0, ElemSize: 4}, Buffers: 1, Count: true, Scalars: 1,
		Host: r.kernel}
}

func TestNewProgramRejectsBadSpecs(t *testing.T) {
	good := recordingSpec(&recorder{})
	tests := []struct {
		name string
		edit func(s *core.ProgramSpec)
	}{
		{"empty image", func(s *core.ProgramSpec) { s.Image = nil }},
		{"no entry", func(s *core.ProgramSpec) { s.Entry = "" }},
		{"block too big", func(s *core.ProgramSpec) { s.Block = 1025 }},
		{"negative buffers", func(s *core.ProgramSpec) { s.Buffers = -1 }},
		{"negative scalars", func(s *core.ProgramSpec) { s.Scalars = -1 }},
		{"too many parameters", func(s *core.ProgramSpec) { s.Scalars = 300 }},
		{"negative element size", func(s *core.ProgramSpec) { s.Grid.ElemSize = -4 }},
		{"grid from a buffer not bound", func(s *core.ProgramSpec) { s.Grid.FromBuffer = 1 }},
		{"grid from a negative buffer", func(s *core.ProgramSpec) { s.Grid.FromBuffer = -1 }},
		{"fixed grid of zero blocks", func(s *core.ProgramSpec) { s.Grid = core.GridRule{}; s.Count = false }},
		{"fixed grid too large", func(s *core.ProgramSpec) { s.Grid = core.GridRule{Blocks: 1 << 31}; s.Count = false }},
		{"cap too large", func(s *core.ProgramSpec) { s.Grid.MaxBlocks = 1 << 31 }},
		{"count with a fixed grid", func(s *core.ProgramSpec) { s.Grid = core.GridRule{Blocks: 4} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := good
			tt.edit(&s)
			p, err := core.NewProgram(s)
			require.ErrorIs(t, err, core.ErrInvalidArgument)
			assert.Nil(t, p)
			assert.Contains(t, err.Error(), "Fix:")
		})
	}
	p, err := core.NewProgram(good)
	require.NoError(t, err)
	assert.Equal(t, "rec", p.Name())
	assert.Equal(t, 1, p.Buffers())
	assert.Equal(t, 1, p.Scalars())
	assert.Equal(t, uint32(core.DefaultMaxBlocks), p.Spec().Grid.MaxBlocks, "the cap defaults")
}

func TestNewProgramCopiesTheImageAndFillsDefaults(t *testing.T) {
	img := append([]byte(nil), kernels.FillPTX...)
	s := recordingSpec(&recorder{})
	s.Image, s.Name, s.Block = img, "", 0
	p, err := core.NewProgram(s)
	require.NoError(t, err)
	img[0] ^= 0xff
	assert.Equal(t, kernels.FillPTX, p.Spec().Image, "the program keeps its own copy")
	assert.Equal(t, kernels.FillEntry, p.Name(), "the name defaults to the entry")
	assert.Equal(t, uint32(core.DefaultBlockSize), p.Spec().Block)
}

func TestDispatchDerivesGridCountAndScalars(t *testing.T) {
	tests := []struct {
		name      string
		bytes     int
		block     uint32
		maxBlocks uint32
		override  uint32
		wantGrid  uint32
		wantCount uint32
	}{
		{"one element", 4, 128, 0, 0, 1, 1},
		{"partial word ignored", 7, 128, 0, 0, 1, 1},
		{"less than one element still launches one block", 3, 128, 0, 0, 1, 0},
		{"exact blocks", 4 * 256, 128, 0, 0, 2, 256},
		{"rounds up", 4 * 257, 128, 0, 0, 3, 257},
		{"capped", 4 * 1000, 32, 5, 0, 5, 1000},
		{"override wins", 4 * 1000, 32, 0, 7, 7, 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, _ := openSim(t, sim.Config{})
			r := &recorder{}
			s := recordingSpec(r)
			s.Block, s.Grid.MaxBlocks = tt.block, tt.maxBlocks
			p, err := core.NewProgram(s)
			require.NoError(t, err)
			h, err := b.Alloc(tt.bytes)
			require.NoError(t, err)
			require.NoError(t, b.Dispatch(p, []core.Buffer{h}, core.DispatchConfig{Grid: tt.override, Scalars: []uint32{42}}))
			require.Len(t, r.cfgs, 1)
			assert.Equal(t, [3]uint32{tt.wantGrid, 1, 1}, r.cfgs[0].Grid)
			assert.Equal(t, [3]uint32{tt.block, 1, 1}, r.cfgs[0].Block)
			ptr, err := b.ResidentDevicePtr(h)
			require.NoError(t, err)
			assert.Equal(t, []core.KernelArg{{Ptr: ptr, IsPtr: true}, {U32: tt.wantCount}, {U32: 42}}, r.args[0])
		})
	}
}

func TestDispatchIgnoresTiming(t *testing.T) {
	b, _ := openSim(t, sim.Config{})
	h := residentWith(t, b, u32s(1, 2))
	require.NoError(t, b.Dispatch(core.ProgramVAddU32(), []core.Buffer{h, h, h}, core.DispatchConfig{Timing: true}))
	assert.Zero(t, b.LaunchResourceCounts().TimingEvents.Created, "no Pending reports it, so no timing events are leased")
}

func TestDispatchFixedGridPassesNoCount(t *testing.T) {
	b, _ := openSim(t, sim.Config{})
	r := &recorder{}
	p, err := core.NewProgram(core.ProgramSpec{Image: kernels.FillPTX, Entry: kernels.FillEntry,
		Block: 64, Grid: core.GridRule{Blocks: 9}, Buffers: 2, Scalars: 2, Host: r.kernel})
	require.NoError(t, err)
	h1, err := b.Alloc(16)
	require.NoError(t, err)
	h2, err := b.Alloc(4)
	require.NoError(t, err)
	require.NoError(t, b.Dispatch(p, []core.Buffer{h1, h2}, core.DispatchConfig{Scalars: []uint32{7, 8}}))
	require.Len(t, r.cfgs, 1)
	assert.Equal(t, [3]uint32{9, 1, 1}, r.cfgs[0].Grid)
	require.Len(t, r.args[0], 4)
	assert.Equal(t, []core.KernelArg{{U32: 7}, {U32: 8}}, r.args[0][2:])
}

func TestDispatchRefusesBadArgumentsBeforeTouchingTheDevice(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	words16 := residentWith(t, b, make([]byte, 64))
	words4 := residentWith(t, b, make([]byte, 16))
	freed, err := b.Alloc(64)
	require.NoError(t, err)
	require.NoError(t, b.Free(freed))
	vadd, scale := core.ProgramVAddU32(), core.ProgramScaleF32()
	tests := []struct {
		name string
		p    *core.Program
		bufs []core.Buffer
		cfg  core.DispatchConfig
		want error
		msg  string
	}{
		{"nil program", nil, nil, core.DispatchConfig{}, core.ErrInvalidArgument, "program is nil"},
		{"too few buffers", vadd, []core.Buffer{words16, words16}, core.DispatchConfig{}, core.ErrInvalidArgument, "binds 3 buffers but got 2"},
		{"too many buffers", scale, []core.Buffer{words16, words16, words16}, core.DispatchConfig{Scalars: []uint32{1}}, core.ErrInvalidArgument, "binds 2 buffers but got 3"},
		{"missing scalar", scale, []core.Buffer{words16, words16}, core.DispatchConfig{}, core.ErrInvalidArgument, "takes 1 scalars but got 0"},
		{"extra scalar", vadd, []core.Buffer{words16, words16, words16}, core.DispatchConfig{Scalars: []uint32{1}}, core.ErrInvalidArgument, "takes 0 scalars but got 1"},
		{"input shorter than the output", vadd, []core.Buffer{words4, words16, words16}, core.DispatchConfig{}, core.ErrInvalidArgument, "buffer 0"},
		{"grid override too large", vadd, []core.Buffer{words16, words16, words16}, core.DispatchConfig{Grid: 1 << 31}, core.ErrInvalidArgument, "grid override"},
		{"freed handle", vadd, []core.Buffer{words16, freed, words16}, core.DispatchConfig{}, core.ErrUnknownHandle, "buffer 1"},
		{"drifted handle", vadd, []core.Buffer{words16, words16, {ID: words16.ID, Len: 4}}, core.DispatchConfig{}, core.ErrUnknownHandle, "buffer 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dev.ResetCalls()
			err := b.Dispatch(tt.p, tt.bufs, tt.cfg)
			require.ErrorIs(t, err, tt.want)
			assert.Contains(t, err.Error(), tt.msg)
			assert.Contains(t, err.Error(), "Fix:")
			pd, err := b.DispatchAsync(tt.p, tt.bufs, tt.cfg)
			require.ErrorIs(t, err, tt.want)
			assert.Nil(t, pd)
			for _, op := range []sim.Op{sim.OpModuleLoad, sim.OpLaunch, sim.OpStreamCreate, sim.OpEventRecord} {
				assert.Zero(t, dev.Calls(op), "%v called", op)
			}
		})
	}
	// Nothing stayed in flight.
	require.NoError(t, b.Free(words16))
	require.NoError(t, b.Free(words4))
}

func TestProgramsSharingAnImageShareOneModule(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	h := residentWith(t, b, make([]byte, 16))
	r1, r2 := &recorder{}, &recorder{}
	p1, err := core.NewProgram(recordingSpec(r1))
	require.NoError(t, err)
	s2 := recordingSpec(r2)
	s2.Image = append([]byte(nil), s2.Image...) // same bytes, another slice
	p2, err := core.NewProgram(s2)
	require.NoError(t, err)
	for range 3 {
		require.NoError(t, b.Dispatch(p1, []core.Buffer{h}, core.DispatchConfig{Scalars: []uint32{1}}))
		require.NoError(t, b.Dispatch(p2, []core.Buffer{h}, core.DispatchConfig{Scalars: []uint32{1}}))
	}
	// On the simulated device each program runs its own twin, so the second
	// program with the same image and entry loads a module of its own.
	assert.Equal(t, uint64(2), dev.Calls(sim.OpModuleLoad), "one load per twin")
	assert.Equal(t, 2, dev.Live().Modules)
	assert.Len(t, r1.cfgs, 3, "each program runs its own twin")
	assert.Len(t, r2.cfgs, 3, "each program runs its own twin")

	// A different image is a second module; built-ins load their own.
	require.NoError(t, b.Dispatch(core.ProgramFillU32(), []core.Buffer{h}, core.DispatchConfig{Scalars: []uint32{5}}))
	require.NoError(t, b.Dispatch(core.ProgramCopyU32(), []core.Buffer{h, h}, core.DispatchConfig{}))
	assert.Equal(t, 4, dev.Live().Modules, "fill has the recorder's image and entry but its own twin, so its own module; copy adds one")
	got, err := b.Download(h.All(), nil)
	require.NoError(t, err)
	assert.Equal(t, le32(5, 5, 5, 5), got, "the fill ran its own twin, not the recorder's")
	require.NoError(t, b.Close())
	assert.Zero(t, dev.Live().Modules, "Close unloads every module")
	assert.ErrorIs(t, b.Dispatch(p1, []core.Buffer{h}, core.DispatchConfig{Scalars: []uint32{1}}), core.ErrClosed)
}

func TestProgramWithoutTwinIsUnsupportedOnSim(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	h := residentWith(t, b, make([]byte, 16))
	s := recordingSpec(nil)
	s.Host = nil
	p, err := core.NewProgram(s)
	require.NoError(t, err)
	err = b.Dispatch(p, []core.Buffer{h}, core.DispatchConfig{Scalars: []uint32{1}})
	require.ErrorIs(t, err, core.ErrUnsupported)
	assert.Zero(t, dev.Calls(sim.OpModuleLoad))
	require.NoError(t, b.Free(h), "the buffer is not left in flight")
}

func TestUnknownEntryLeavesNoModuleLoaded(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	h := residentWith(t, b, make([]byte, 16))
	s := recordingSpec(&recorder{})
	s.Entry = "no_such_kernel"
	p, err := core.NewProgram(s)
	require.NoError(t, err)
	err = b.Dispatch(p, []core.Buffer{h}, core.DispatchConfig{Scalars: []uint32{1}})
	require.ErrorIs(t, err, core.ErrDriver)
	assert.Contains(t, err.Error(), "no_such_kernel")
	assert.Zero(t, dev.Live().Modules)
	assert.Zero(t, b.LaunchResourceCounts().Leases)
}

func TestDispatchConcurrentGoroutines(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	const workers = 8
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewSource(int64(w)))
			n := 1 + r.Intn(64)
			a := make([]uint32, n)
			for i := range a {
				a[i] = r.Uint32()
			}
			h, err := b.Alloc(4 * n)
			if err != nil {
				errs[w] = err
				return
			}
			if err := b.Upload(core.UploadAt{Buf: h, Data: u32s(a...)}); err != nil {
				errs[w] = err
				return
			}
			for range 10 {
				if err := b.Dispatch(core.ProgramVAddU32(), []core.Buffer{h, h, h}, core.DispatchConfig{}); err != nil {
					errs[w] = err
					return
				}
			}
			got, err := b.Download(h.All(), nil)
			if err != nil {
				errs[w] = err
				return
			}
			for i, v := range words(got) {
				if v != a[i]<<10 {
					errs[w] = assert.AnError
					return
				}
			}
			errs[w] = b.Free(h)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	assert.Equal(t, uint64(1), dev.Calls(sim.OpModuleLoad), "concurrent first uses load the module once")
}
