package core_test

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// builtinArgs is the Args form of a built-in dispatch over bufs with the
// u32 scalars, typed as the program's Params say.
func builtinArgs(t *testing.T, p *core.Program, bufs []core.Buffer, scalars []uint32) []core.Arg {
	t.Helper()
	var args []core.Arg
	for _, typ := range p.Params() {
		switch typ {
		case core.ParamBuffer:
			args, bufs = append(args, core.ArgBuffer(bufs[0])), bufs[1:]
		case core.ParamUint32:
			args, scalars = append(args, core.ArgUint32(scalars[0])), scalars[1:]
		case core.ParamFloat32:
			args, scalars = append(args, core.ArgFloat32(math.Float32frombits(scalars[0]))), scalars[1:]
		default:
			t.Fatalf("%s declares a %v parameter", p.Name(), typ)
		}
	}
	require.Empty(t, bufs, p.Name())
	require.Empty(t, scalars, p.Name())
	return args
}

func TestBuiltinParams(t *testing.T) {
	b, f32 := core.ParamBuffer, core.ParamFloat32
	assert.Equal(t, []core.ParamType{b, core.ParamUint32}, core.ProgramFillU32().Params())
	assert.Equal(t, []core.ParamType{b, b}, core.ProgramCopyU32().Params())
	assert.Equal(t, []core.ParamType{b, b, b}, core.ProgramVAddU32().Params())
	assert.Equal(t, []core.ParamType{b, b, f32}, core.ProgramScaleF32().Params())
	p := core.ProgramFillU32().Params()
	p[0] = core.ParamInt8
	assert.Equal(t, core.ParamBuffer, core.ProgramFillU32().Params()[0], "Params returns a copy")
	var nilProgram *core.Program
	assert.Nil(t, nilProgram.Params())
	typed := typedProgram(t, []core.ParamType{core.ParamBuffer, core.ParamInt64}, nil)
	assert.Equal(t, []core.ParamType{core.ParamBuffer, core.ParamInt64}, typed.Params())
}

// Every built-in gives the same bytes whether a dispatch passes Bufs and
// u32 Scalars or typed Args, alone or in a Batch mixing both forms.
func TestBuiltinArgsMatchBufsAndScalars(t *testing.T) {
	for _, bc := range builtinCases() {
		for _, n := range []int{1, 257} {
			t.Run(fmt.Sprintf("%s/n=%d", bc.name, n), func(t *testing.T) {
				b, dev := openSim(t, sim.Config{})
				r := rand.New(rand.NewSource(int64(n)))
				in, scalars, want := bc.setup(r, n)
				bufs := make([]core.Buffer, len(in))
				for i, w := range in {
					bufs[i] = residentWith(t, b, u32s(w...))
				}
				p := bc.program()
				require.NoError(t, b.Dispatch(p, nil, core.DispatchConfig{Args: builtinArgs(t, p, bufs, scalars)}))
				for i, h := range bufs {
					assert.Equal(t, want[i], words(deviceBytes(t, b, dev, h)), "Args: buffer %d", i)
				}

				// Both forms in one batch: the same step twice over fresh inputs.
				again := make([]core.Buffer, len(in))
				for i, w := range in {
					again[i] = residentWith(t, b, u32s(w...))
				}
				steps := []core.Step{
					{Program: p, Bufs: bufs, Config: core.DispatchConfig{Scalars: scalars}},
					{Program: p, Config: core.DispatchConfig{Args: builtinArgs(t, p, again, scalars)}},
				}
				_, err := b.Run(core.Batch{Steps: steps}, nil)
				require.NoError(t, err)
				for i := range in {
					assert.Equal(t, want[i], words(deviceBytes(t, b, dev, again[i])), "mixed batch: buffer %d", i)
				}
				assert.Nil(t, steps[1].Bufs, "the caller's steps are left as they were")
				assert.NotEmpty(t, steps[1].Config.Args)
			})
		}
	}
}

// A captured Graph of a built-in step with Args replays it.
func TestBuiltinArgsReplayFromAGraph(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	x := residentWith(t, b, u32s(1, 2, 3))
	out := residentWith(t, b, u32s(0, 0, 0))
	p := core.ProgramVAddU32()
	g, err := b.Capture(core.Batch{Steps: []core.Step{{Program: p,
		Config: core.DispatchConfig{Args: []core.Arg{core.ArgBuffer(x), core.ArgBuffer(out), core.ArgBuffer(out)}}}}})
	require.NoError(t, err)
	for range 3 {
		_, err := g.Replay(nil)
		require.NoError(t, err)
	}
	assert.Equal(t, []uint32{3, 6, 9}, words(deviceBytes(t, b, dev, out)))
	require.NoError(t, g.Close())
}

func TestBuiltinArgsRefusals(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	h := residentWith(t, b, u32s(1, 2, 3, 4))
	small := residentWith(t, b, u32s(1))
	fill, copyU32 := core.ProgramFillU32(), core.ProgramCopyU32()
	cases := []struct {
		name  string
		p     *core.Program
		bufs  []core.Buffer
		cfg   core.DispatchConfig
		parts []string
	}{
		{"too few", fill, nil, core.DispatchConfig{Args: []core.Arg{core.ArgBuffer(h)}},
			[]string{"takes 2 arguments [buffer uint32] but got 1"}},
		{"wrong type", fill, nil, core.DispatchConfig{Args: []core.Arg{core.ArgBuffer(h), core.ArgInt32(1)}},
			[]string{"argument 1 is int32; the parameter is uint32", "ArgUint32"}},
		{"unset", fill, nil, core.DispatchConfig{Args: []core.Arg{core.ArgBuffer(h), {}}},
			[]string{"argument 1 is unset"}},
		{"offset", fill, nil, core.DispatchConfig{Args: []core.Arg{core.ArgBufferAt(h, 4), core.ArgUint32(1)}},
			[]string{"whole buffers", "offset 4"}},
		{"both forms", fill, []core.Buffer{h}, core.DispatchConfig{Args: []core.Arg{core.ArgBuffer(h), core.ArgUint32(1)}},
			[]string{"got 2 Args and also 1 Bufs"}},
		{"source shorter than the count", copyU32, nil, core.DispatchConfig{Args: []core.Arg{core.ArgBuffer(small), core.ArgBuffer(h)}},
			[]string{"processes 4 elements"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			calls := dev.CallCounts()
			err := b.Dispatch(c.p, c.bufs, c.cfg)
			requireErrKind(t, err, core.ErrInvalidArgument, append(c.parts, "Dispatch")...)
			_, err = b.Run(core.Batch{Steps: []core.Step{{Program: fill, Bufs: []core.Buffer{h}, Config: core.DispatchConfig{Scalars: []uint32{1}}},
				{Program: c.p, Bufs: c.bufs, Config: c.cfg}}}, nil)
			requireErrKind(t, err, core.ErrInvalidArgument, append(c.parts, "step 1: ")...)
			assert.Equal(t, calls, dev.CallCounts(), "a refused dispatch reaches no driver call")
		})
	}
	assert.Equal(t, []uint32{1, 2, 3, 4}, words(deviceBytes(t, b, dev, h)))
	require.NoError(t, b.Free(h), "no refusal left the buffer in flight")
	require.NoError(t, b.Free(small))
}
