package core_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/kernels"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// imageRecorder is a simulated device that remembers every image loaded;
// every other method, optional capabilities included, is the device's.
type imageRecorder struct {
	*sim.Device
	mu     sync.Mutex
	images [][]byte
}

func (r *imageRecorder) ModuleLoad(image []byte) (core.Module, error) {
	r.mu.Lock()
	r.images = append(r.images, bytes.Clone(image))
	r.mu.Unlock()
	return r.Device.ModuleLoad(image)
}

func (r *imageRecorder) loaded(image []byte) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, im := range r.images {
		if bytes.Equal(im, image) {
			return true
		}
	}
	return false
}

// openRecorded opens a Backend over an imageRecorder of a device made from
// cfg, with the leak check at cleanup.
func openRecorded(t *testing.T, cfg sim.Config, opts ...core.Option) (*core.Backend, *imageRecorder) {
	t.Helper()
	cfg.TotalMemory = testMemory
	r := &imageRecorder{Device: sim.New(cfg)}
	b, err := core.Open(r, append([]core.Option{core.WithLogger(quietLogger)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := b.Close(); err != nil && !errors.Is(err, core.ErrClosed) {
			t.Errorf("Close: %v", err)
		}
		sim.RequireNoLeaks(t, r.Device)
	})
	return b, r
}

// runPingPong runs W5's shape with steps launches on b and checks the
// result.
func runPingPong(t *testing.T, b *core.Backend, steps int) {
	t.Helper()
	const n = 16
	var bufs [3]core.Buffer
	for i := range bufs {
		h, err := b.Alloc(4 * n)
		require.NoError(t, err)
		bufs[i] = h
	}
	one := make([]byte, 4*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(one[4*i:], 1)
	}
	p, q, o := bufs[0], bufs[1], bufs[2]
	out, err := b.Run(core.Batch{Clears: []core.Buffer{p, q}, Uploads: []core.UploadAt{{Buf: o, Data: one}},
		Steps: pingPong(p, q, o, steps), Reads: []core.Range{{Buf: p, Len: 4 * n}, {Buf: q, Len: 4 * n}}}, nil)
	require.NoError(t, err)
	// Step i writes i+1, to q when i is even and to p when it is odd.
	wantP, wantQ := uint32(steps), uint32(steps-1)
	if steps%2 == 1 {
		wantP, wantQ = wantQ, wantP
	}
	for i := 0; i < n; i++ {
		require.Equal(t, wantP, words(out[0])[i])
		require.Equal(t, wantQ, words(out[1])[i])
	}
	for _, h := range bufs {
		require.NoError(t, b.Free(h))
	}
}

func TestProgrammaticLaunchChoice(t *testing.T) {
	noPDL := sim.DefaultCapabilities()
	noPDL.ProgrammaticLaunch = false
	tests := []struct {
		name string
		cfg  sim.Config
		opts []core.Option
		want bool
	}{
		{"compute capability 9.0 with the entry point", sim.Config{}, nil, true},
		{"compute capability 10.0", sim.Config{CCMajor: 10}, nil, true},
		{"turned off by the option", sim.Config{}, []core.Option{core.WithProgrammaticLaunch(false)}, false},
		{"turned on explicitly", sim.Config{}, []core.Option{core.WithProgrammaticLaunch(true)}, true},
		{"compute capability 8.0", sim.Config{CCMajor: 8}, nil, false},
		{"driver without cuLaunchKernelEx", sim.Config{Capabilities: &noPDL}, nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, r := openRecorded(t, tc.cfg, tc.opts...)
			assert.Equal(t, tc.want, b.ProgrammaticLaunch())
			const steps = 7
			runPingPong(t, b, steps)
			if tc.want {
				assert.True(t, r.loaded(kernels.VAddPTXSM90), "the sm_90 image is loaded")
				assert.False(t, r.loaded(kernels.VAddPTX))
				assert.Equal(t, uint64(steps-1), r.Calls(sim.OpLaunchProgrammatic), "every step after the first")
			} else {
				assert.True(t, r.loaded(kernels.VAddPTX), "the portable image is loaded")
				assert.False(t, r.loaded(kernels.VAddPTXSM90))
				assert.Zero(t, r.Calls(sim.OpLaunchProgrammatic))
			}
			assert.Equal(t, uint64(steps), r.Calls(sim.OpLaunch))
		})
	}
	var nilBackend *core.Backend
	assert.False(t, nilBackend.ProgrammaticLaunch())
}

func TestProgrammaticLaunchNeedsBatchLauncher(t *testing.T) {
	// A driver that reports the capability but queues launches one by one
	// cannot mark them.
	dev := sim.New(sim.Config{TotalMemory: testMemory})
	b, err := core.Open(struct {
		core.Driver
		core.CapabilityReporter
		core.HostKernelBinder
	}{dev, dev, dev}, core.WithLogger(quietLogger))
	require.NoError(t, err)
	assert.False(t, b.ProgrammaticLaunch())
	runPingPong(t, b, 3)
	assert.Zero(t, dev.Calls(sim.OpLaunchProgrammatic))
	require.NoError(t, b.Close())
	sim.RequireNoLeaks(t, dev)
}

// addOneProgram is a user program over one buffer of u32 words that adds 1
// to each; waits marks it as waiting on its grid dependencies.
func addOneProgram(t *testing.T, waits bool) *core.Program {
	t.Helper()
	entry := fmt.Sprintf("vyre_test_add_one_%v", waits)
	body := "\tret;\n"
	if waits {
		body = "\tgriddepcontrol.wait;\n" + body
	}
	image := []byte(".version 7.8\n.target sm_90\n.address_size 64\n.visible .entry " + entry + "(\n\t.param .u64 p0,\n\t.param .u32 p1\n)\n{\n" + body + "}\n")
	p, err := core.NewProgram(core.ProgramSpec{Image: image, Entry: entry, Buffers: 1,
		Grid: core.GridRule{FromBuffer: 0, ElemSize: 4}, Count: true, WaitsOnGridDependencies: waits,
		Host: func(mem core.KernelMemory, _ core.LaunchConfig, args []core.KernelArg) error {
			v, err := mem.Bytes(args[0].Ptr, 4*int(args[1].U32))
			if err != nil {
				return err
			}
			for i := 0; i < len(v); i += 4 {
				binary.LittleEndian.PutUint32(v[i:], binary.LittleEndian.Uint32(v[i:])+1)
			}
			return nil
		}})
	require.NoError(t, err)
	return p
}

func TestProgrammaticLaunchOnlyForWaitingStepsAfterALaunch(t *testing.T) {
	waiting, plain := addOneProgram(t, true), addOneProgram(t, false)
	vadd := core.ProgramVAddU32()
	tests := []struct {
		name  string
		progs []*core.Program
		want  uint64 // programmatic launches
	}{
		{"one step", []*core.Program{vadd}, 0},
		{"a waiting first step is not programmatic", []*core.Program{waiting, vadd}, 1},
		{"unmarked user programs stay plain", []*core.Program{vadd, plain, plain, vadd}, 1},
		{"marked user programs and built-ins", []*core.Program{plain, waiting, vadd, waiting, plain}, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, dev := openSim(t, sim.Config{})
			x, err := b.Alloc(64)
			require.NoError(t, err)
			y, err := b.Alloc(64)
			require.NoError(t, err)
			var steps []core.Step
			want := uint32(0)
			for _, p := range tc.progs {
				if p == vadd {
					steps = append(steps, core.Step{Program: p, Bufs: []core.Buffer{x, y, x}}) // x += 2
					want += 2
					continue
				}
				steps = append(steps, core.Step{Program: p, Bufs: []core.Buffer{x}})
				want++
			}
			two := bytes.Repeat([]byte{2, 0, 0, 0}, 16)
			out, err := b.Run(core.Batch{Clears: []core.Buffer{x}, Uploads: []core.UploadAt{{Buf: y, Data: two}},
				Steps: steps, Reads: []core.Range{{Buf: x, Len: 64}}}, nil)
			require.NoError(t, err)
			for _, w := range words(out[0]) {
				require.Equal(t, want, w)
			}
			assert.Equal(t, tc.want, dev.Calls(sim.OpLaunchProgrammatic))
			assert.Equal(t, uint64(len(tc.progs)), dev.Calls(sim.OpLaunch))
			require.NoError(t, b.Free(x))
			require.NoError(t, b.Free(y))
		})
	}
}

func TestProgrammaticLaunchFailureStopsAtTheStep(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	p, err := b.Alloc(64)
	require.NoError(t, err)
	q, err := b.Alloc(64)
	require.NoError(t, err)
	one, err := b.Alloc(64)
	require.NoError(t, err)
	dev.FailNth(sim.OpLaunchProgrammatic, 3, cudaapi.CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)
	dst := [][]byte{[]byte("kept")}
	got, err := b.Run(core.Batch{Steps: pingPong(p, q, one, 6), Reads: []core.Range{{Buf: p, Len: 64}}}, dst)
	require.ErrorIs(t, err, core.ErrDriver)
	require.ErrorIs(t, err, cudaapi.CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)
	assert.Contains(t, err.Error(), "step 3")
	assert.Equal(t, dst, got, "the caller's slots stay as they were")
	for _, h := range []core.Buffer{p, q, one} {
		require.NoError(t, b.Free(h), "nothing stays in flight")
	}
}

func TestNewProgramRefusesAPTXMarkedWaitingWithoutTheWait(t *testing.T) {
	spec := core.ProgramSpec{Name: "nowait", Entry: "nowait", Buffers: 1, Grid: core.GridRule{Blocks: 1},
		Image: []byte(".version 7.8\n.target sm_90\n.address_size 64\n.visible .entry nowait(\n\t.param .u64 p0\n)\n{\n\tret;\n}\n")}
	p, err := core.NewProgram(spec)
	require.NoError(t, err, "unmarked, it is an ordinary program")
	assert.False(t, p.Spec().WaitsOnGridDependencies)

	spec.WaitsOnGridDependencies = true
	_, err = core.NewProgram(spec)
	require.ErrorIs(t, err, core.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "griddepcontrol.wait")
	assert.Contains(t, err.Error(), `"nowait"`)

	spec.Image = []byte("\x7fELF\x02\x01\x01 a cubin cannot be read")
	_, err = core.NewProgram(spec)
	require.NoError(t, err, "a binary image is trusted")

	spec.Image = kernels.VAddPTXSM90
	_, err = core.NewProgram(spec)
	require.NoError(t, err, "the built-ins' sm_90 images wait")
}
