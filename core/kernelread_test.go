package core_test

// Reads into memory from AllocHostPinned, and reads into Go slices through
// the Backend's staging, that follow a batch's kernel steps are written by
// a copy kernel instead of a DMA (WithKernelReads):
// which reads take that path, that their bytes are the device's, in Run,
// RunAsync and graph replays, and that a failure on the way leaves
// nothing held.

import (
	"encoding/binary"
	"math"
	"math/rand"
	"runtime"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// kernelReadStep is one step of W8's shape on the simulated device: n
// bytes uploaded into x from pinned memory, y = 3x (ScaleF32), y read back.
type kernelReadStep struct {
	b    *core.Backend
	dev  *sim.Device
	x, y core.Buffer
	in   []byte // pinned input, random float32s
}

func newKernelReadStep(t *testing.T, n int, cfg sim.Config, opts ...core.Option) *kernelReadStep {
	t.Helper()
	b, dev := openSim(t, cfg, opts...)
	s := &kernelReadStep{b: b, dev: dev}
	var err error
	s.x, err = b.Alloc(n)
	require.NoError(t, err)
	s.y, err = b.Alloc(n)
	require.NoError(t, err)
	p, err := b.AllocHostPinned(n)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Free() })
	s.in = p.Bytes()
	fillFloats(rand.New(rand.NewSource(int64(n))), s.in)
	return s
}

// fillFloats fills b with small random float32s.
func fillFloats(r *rand.Rand, b []byte) {
	for i := 0; i+4 <= len(b); i += 4 {
		binary.LittleEndian.PutUint32(b[i:], math.Float32bits(float32(r.Intn(1000))-500))
	}
}

// batch is the step; with step false it only uploads x and reads x back.
func (s *kernelReadStep) batch(step bool, read core.Range) core.Batch {
	batch := core.Batch{Uploads: []core.UploadAt{{Buf: s.x, Data: s.in}}, Reads: []core.Range{read}}
	if step {
		batch.Steps = []core.Step{{Program: core.ProgramScaleF32(), Bufs: []core.Buffer{s.x, s.y},
			Config: core.DispatchConfig{Scalars: []uint32{math.Float32bits(3)}}}}
	}
	return batch
}

// requireScaled checks that out holds 3x for the words of in it covers.
func requireScaled(t *testing.T, in, out []byte) {
	t.Helper()
	for i := 0; i+4 <= len(out); i += 4 {
		want := 3 * math.Float32frombits(binary.LittleEndian.Uint32(in[i:]))
		if got := math.Float32frombits(binary.LittleEndian.Uint32(out[i:])); got != want {
			t.Fatalf("word %d: %v, want %v", i/4, got, want)
		}
	}
}

// scaled is 3x of in's whole words (what the step leaves in y).
func scaled(in []byte) []byte {
	out := make([]byte, len(in)/4*4)
	for i := 0; i+4 <= len(in); i += 4 {
		binary.LittleEndian.PutUint32(out[i:], math.Float32bits(3*math.Float32frombits(binary.LittleEndian.Uint32(in[i:]))))
	}
	return out
}

// kernelReadPaths counts what a Run did to read back: copy kernels
// launched beside the step and DMAs to the host.
type kernelReadPaths struct{ launches, d2h uint64 }

func (s *kernelReadStep) paths() kernelReadPaths {
	return kernelReadPaths{s.dev.Calls(sim.OpLaunch), s.dev.Calls(sim.OpMemcpyDtoHAsync)}
}

// TestKernelReadsTakeTheReadsTheyShould: a read into AllocHostPinned memory
// behind a kernel step, of 64 KiB to 2 MiB by default, whole words at word
// addresses, is one launch more and one DMA less than the same Run with
// kernel reads off, and its bytes are the device's either way; every other
// read is a DMA.
func TestKernelReadsTakeTheReadsTheyShould(t *testing.T) {
	unmapped := sim.DefaultCapabilities()
	unmapped.MappedPinnedHost = false
	cases := []struct {
		name   string
		n      int
		step   bool
		dst    string // "alloc", "register", "alloc+2" (misaligned), "go" (staged)
		offset int    // where the read starts in y
		length int    // bytes read from y (0: all of it)
		cfg    sim.Config
		opts   []core.Option
		kernel bool
	}{
		{name: "128 KiB behind a step", n: 128 << 10, step: true, dst: "alloc", kernel: true},
		{name: "64 KiB, the smallest by default", n: 64 << 10, step: true, dst: "alloc", kernel: true},
		{name: "2 MiB, the largest by default", n: 2 << 20, step: true, dst: "alloc", kernel: true},
		{name: "16 KiB", n: 16 << 10, step: true, dst: "alloc"},
		{name: "4 MiB", n: 4 << 20, step: true, dst: "alloc"},
		{name: "no kernel step before it", n: 128 << 10, dst: "alloc"},
		{name: "memory pinned with PinHostBuffer", n: 128 << 10, step: true, dst: "register"},
		{name: "a length of half words", n: 128 << 10, step: true, dst: "alloc", length: 128<<10 - 2},
		{name: "a destination off a word boundary", n: 128 << 10, step: true, dst: "alloc+2"},
		{name: "device without mapped pinned memory", n: 128 << 10, step: true, dst: "alloc",
			cfg: sim.Config{Capabilities: &unmapped}},
		{name: "turned off", n: 128 << 10, step: true, dst: "alloc", opts: []core.Option{core.WithKernelReads(0, -1)}},
		{name: "bounds lowered to 16 KiB", n: 16 << 10, step: true, dst: "alloc",
			opts: []core.Option{core.WithKernelReads(4, 16<<10)}, kernel: true},
		{name: "a Go slice, through the staging", n: 128 << 10, step: true, dst: "go", kernel: true},
		{name: "a Go slice, 16 KiB", n: 16 << 10, step: true, dst: "go"},
		{name: "a Go slice, 4 MiB", n: 4 << 20, step: true, dst: "go"},
		{name: "a Go slice, no kernel step before it", n: 128 << 10, dst: "go"},
		{name: "a Go slice, half words", n: 128 << 10, step: true, dst: "go", length: 128<<10 - 2},
		{name: "a Go slice, a source off a word boundary", n: 128 << 10, step: true, dst: "go", offset: 2, length: 96 << 10},
		{name: "a Go slice, turned off", n: 128 << 10, step: true, dst: "go", opts: []core.Option{core.WithKernelReads(0, -1)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newKernelReadStep(t, tc.n, tc.cfg, tc.opts...)
			read := s.y.All()
			if !tc.step {
				read = s.x.All()
			}
			read.Offset = tc.offset
			if tc.length > 0 {
				read.Len = tc.length
			}
			slot := kernelReadSlot(t, s.b, tc.dst, read.Len)
			before := s.paths()
			tel0 := s.b.Telemetry()
			batch := s.batch(tc.step, read)
			out, err := s.b.Run(batch, [][]byte{slot[:0]})
			require.NoError(t, err)
			require.Equal(t, unsafe.SliceData(slot), unsafe.SliceData(out[0]), "the read landed in the pinned slot")
			if tc.step {
				require.Equal(t, scaled(s.in)[tc.offset:tc.offset+read.Len], out[0])
			} else {
				require.Equal(t, s.in, out[0])
			}
			after, tel := s.paths(), s.b.Telemetry()
			kernels, d2h := after.launches-before.launches-uint64(len(batch.Steps)), after.d2h-before.d2h
			if tc.kernel {
				assert.Equal(t, kernelReadPaths{1, 0}, kernelReadPaths{kernels, d2h}, "a copy kernel and no DMA")
				assert.Equal(t, uint64(1), tel.PackedLaunches-tel0.PackedLaunches)
				assert.Equal(t, uint64(1), tel.DeviceCopies-tel0.DeviceCopies, "the upload's DMA only")
			} else {
				// A large read into Go memory lands in chunks (TestRunLandsLargeReadsInChunks).
				assert.Equal(t, uint64(0), kernels, "no copy kernel")
				assert.True(t, d2h == 1 || (tc.dst == "go" && d2h > 1), "%d DMAs", d2h)
				assert.Equal(t, 1+d2h, tel.DeviceCopies-tel0.DeviceCopies)
			}
			assert.Equal(t, uint64(read.Len), tel.DeviceToHostBytes-tel0.DeviceToHostBytes)
		})
	}
}

// kernelReadSlot returns n bytes for a read to land in: pinned memory from
// AllocHostPinned ("alloc", "alloc+2": two bytes in) or a Go slice pinned
// with PinHostBuffer ("register"), released at cleanup, or a plain Go
// slice ("go"), which the read reaches through the Backend's staging.
func kernelReadSlot(t *testing.T, b *core.Backend, how string, n int) []byte {
	t.Helper()
	if how == "go" {
		return make([]byte, n)
	}
	if how == "register" {
		reg := make([]byte, n)
		require.NoError(t, b.PinHostBuffer(unsafe.Pointer(&reg[0]), n))
		t.Cleanup(func() {
			assert.NoError(t, b.UnpinHostBuffer(unsafe.Pointer(&reg[0])))
			runtime.KeepAlive(reg)
		})
		return reg
	}
	off := 0
	if how == "alloc+2" {
		off = 2
	}
	p, err := b.AllocHostPinned(n + off)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, p.Free()) })
	return p.Bytes()[off : off+n]
}

// TestKernelReadsInRunAsyncAndGraphs: with the read's destination given
// in Batch.Into, RunAsync holds it in flight until collected and a
// captured graph writes it with the copy kernel on every replay, each
// time with the device's bytes of fresh inputs.
func TestKernelReadsInRunAsyncAndGraphs(t *testing.T) {
	const n = 128 << 10
	s := newKernelReadStep(t, n, sim.Config{})
	res, err := s.b.AllocHostPinned(n)
	require.NoError(t, err)
	batch := s.batch(true, s.y.All())
	batch.Into = [][]byte{res.Bytes()}

	pd, err := s.b.RunAsync(batch)
	require.NoError(t, err)
	assert.ErrorIs(t, res.Free(), core.ErrInFlight, "the copy kernel's destination is in flight")
	out, err := pd.AwaitInto(nil)
	require.NoError(t, err)
	requireScaled(t, s.in, out[0])

	g := s.capture(t, batch, kernelReadPaths{2, 0}, "the graph holds the step and the copy kernel, no DMA to the host")
	s.replayFresh(t, g, 7, func(out [][]byte) {
		requireScaled(t, s.in, out[0])
		assert.Equal(t, &res.Bytes()[0], &out[0][0], "the result slot is Into")
	})
	assert.ErrorIs(t, res.Free(), core.ErrInFlight, "the graph holds its destination until Close")
	require.NoError(t, g.Close())
	require.NoError(t, res.Free())
}

// TestKernelReadFailuresHoldNothing: when the copy kernel's module fails
// to load, Run fails before anything is queued (the device buffers and the
// destination unchanged); when its launch fails, Run fails naming the
// launch. Either way the pinned memory can be freed at once and the same
// Run succeeds afterwards.
func TestKernelReadFailuresHoldNothing(t *testing.T) {
	const n = 128 << 10
	for _, fault := range []struct {
		name string
		op   sim.Op
		nth  int
	}{{"module load", sim.OpModuleLoad, 2}, {"launch", sim.OpLaunch, 2}} {
		t.Run(fault.name, func(t *testing.T) {
			s := newKernelReadStep(t, n, sim.Config{})
			res, err := s.b.AllocHostPinned(n)
			require.NoError(t, err)
			mark := make([]byte, n)
			for i := range mark {
				mark[i] = 0xa5
			}
			copy(res.Bytes(), mark)
			yBefore, err := s.b.Download(s.y.All(), nil)
			require.NoError(t, err)

			s.dev.FailNth(fault.op, fault.nth, cudaapi.CUDA_ERROR_UNKNOWN)
			dst := [][]byte{res.Bytes()[:0]}
			got, err := s.b.Run(s.batch(true, s.y.All()), dst)
			require.ErrorIs(t, err, core.ErrDriver)
			assert.Equal(t, dst, got, "dst returned unchanged")
			if fault.op == sim.OpModuleLoad {
				assert.Equal(t, mark, res.Bytes(), "nothing was queued: the destination is unchanged")
				yNow, err := s.b.Download(s.y.All(), nil)
				require.NoError(t, err)
				assert.Equal(t, yBefore, yNow, "nothing was queued: y is unchanged")
			} else {
				assert.Contains(t, err.Error(), "Launch")
			}
			require.NoError(t, res.Free(), "nothing holds the destination after the failure")
			res, err = s.b.AllocHostPinned(n)
			require.NoError(t, err)
			t.Cleanup(func() { _ = res.Free() })
			out, err := s.b.Run(s.batch(true, s.y.All()), [][]byte{res.Bytes()[:0]})
			require.NoError(t, err)
			requireScaled(t, s.in, out[0])
		})
	}
}

// TestKernelReadsIntoStaging: reads into Go slices land in the Backend's
// staging, so RunAsync without Into and a captured graph write them with
// the copy kernel too, and a read after one of odd length still qualifies
// (each read starts on a whole word of the staging).
func TestKernelReadsIntoStaging(t *testing.T) {
	const n = 128 << 10
	s := newKernelReadStep(t, n, sim.Config{})
	batch := s.batch(true, s.y.All())
	batch.Reads = []core.Range{{Buf: s.x, Offset: 0, Len: 6}, s.y.All()}

	before := s.paths()
	pd, err := s.b.RunAsync(batch)
	require.NoError(t, err)
	out, err := pd.AwaitInto(nil)
	require.NoError(t, err)
	after := s.paths()
	assert.Equal(t, kernelReadPaths{1, 1}, kernelReadPaths{after.launches - before.launches - 1, after.d2h - before.d2h},
		"six bytes by DMA, the 128 KiB by a copy kernel")
	assert.Equal(t, s.in[:6], out[0])
	requireScaled(t, s.in, out[1])

	g := s.capture(t, batch, kernelReadPaths{2, 1}, "the graph holds the step, the copy kernel and the six bytes' DMA")
	defer func() { require.NoError(t, g.Close()) }()
	s.replayFresh(t, g, 11, func(out [][]byte) {
		assert.Equal(t, s.in[:6], out[0])
		requireScaled(t, s.in, out[1])
	})
}

// capture captures batch and checks the launches and DMAs to the host the
// capture recorded against want.
func (s *kernelReadStep) capture(t *testing.T, batch core.Batch, want kernelReadPaths, msg string) *core.Graph {
	t.Helper()
	before := s.paths()
	g, err := s.b.Capture(batch)
	require.NoError(t, err)
	after := s.paths()
	assert.Equal(t, want, kernelReadPaths{after.launches - before.launches, after.d2h - before.d2h}, msg)
	return g
}

// replayFresh replays g five times, each with fresh random inputs in s.in,
// and hands each replay's reads to check.
func (s *kernelReadStep) replayFresh(t *testing.T, g *core.Graph, seed int64, check func(out [][]byte)) {
	t.Helper()
	r := rand.New(rand.NewSource(seed))
	for i := range 5 {
		fillFloats(r, s.in)
		out, err := g.Replay(nil)
		require.NoError(t, err, "replay %d", i)
		check(out)
	}
}
