package core_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// recordTwin records the arguments it receives and writes every scalar's
// bits, 8 bytes each, at the first buffer parameter's address, so a test
// reads back what a kernel would have been passed.
func recordTwin(seen *[]core.KernelArg) core.HostKernel {
	return func(mem core.KernelMemory, _ core.LaunchConfig, args []core.KernelArg) error {
		*seen = append((*seen)[:0], args...)
		var out []byte
		for _, a := range args {
			if !a.IsPtr {
				out = binary.LittleEndian.AppendUint64(out, a.Uint64())
			}
		}
		for _, a := range args {
			if a.IsPtr {
				dst, err := mem.Bytes(a.Ptr, len(out))
				if err != nil {
					return err
				}
				copy(dst, out)
				return nil
			}
		}
		return fmt.Errorf("no buffer parameter")
	}
}

var everyType = []core.ParamType{core.ParamBuffer, core.ParamInt8, core.ParamInt16, core.ParamInt32, core.ParamInt64,
	core.ParamUint8, core.ParamUint16, core.ParamUint32, core.ParamUint64, core.ParamFloat32, core.ParamFloat64}

func typedProgram(t *testing.T, params []core.ParamType, host core.HostKernel) *core.Program {
	t.Helper()
	p, err := core.NewProgram(core.ProgramSpec{Name: "typed", Image: []byte(".entry typed {}"), Entry: "typed",
		Grid: core.GridRule{Blocks: 1}, Params: params, Host: host})
	require.NoError(t, err)
	return p
}

func TestTypedParamsReachTheTwinWithTheirValues(t *testing.T) {
	b, _ := openSim(t, sim.Config{})
	var seen []core.KernelArg
	p := typedProgram(t, everyType, recordTwin(&seen))
	assert.Equal(t, 1, p.Buffers())
	buf, err := b.Alloc(128)
	require.NoError(t, err)
	args := []core.Arg{core.ArgBufferAt(buf, 8), core.ArgInt8(-3), core.ArgInt16(-300), core.ArgInt32(-70000), core.ArgInt64(-1 << 40),
		core.ArgUint8(250), core.ArgUint16(65000), core.ArgUint32(4e9), core.ArgUint64(1 << 63), core.ArgFloat32(1.5), core.ArgFloat64(-2.25)}
	require.NoError(t, b.Dispatch(p, nil, core.DispatchConfig{Args: args}))

	require.Len(t, seen, len(args))
	assert.True(t, seen[0].IsPtr)
	assert.Equal(t, core.ParamBuffer, seen[0].Type)
	assert.Equal(t, int8(-3), seen[1].Int8())
	assert.Equal(t, int16(-300), seen[2].Int16())
	assert.Equal(t, int32(-70000), seen[3].Int32())
	assert.Equal(t, int64(-1<<40), seen[4].Int64())
	assert.Equal(t, uint8(250), seen[5].Uint8())
	assert.Equal(t, uint16(65000), seen[6].Uint16())
	assert.Equal(t, uint32(4e9), seen[7].Uint32())
	assert.Equal(t, uint64(1<<63), seen[8].Uint64())
	assert.Equal(t, float32(1.5), seen[9].Float32())
	assert.Equal(t, -2.25, seen[10].Float64())
	for i, a := range seen[1:] {
		assert.Equal(t, everyType[i+1], a.Type, "argument %d", i+1)
	}

	// The offset moved the pointer: the twin wrote from byte 8 on.
	got, err := b.Download(buf.All(), nil)
	require.NoError(t, err)
	assert.Equal(t, make([]byte, 8), got[:8])
	assert.Equal(t, uint64(0xfd), binary.LittleEndian.Uint64(got[8:]), "an int8 travels zero-extended in its slot")
	assert.Equal(t, math.Float64bits(-2.25), binary.LittleEndian.Uint64(got[8+9*8:]))
}

func TestTypedDispatchRefusalsQueueNothing(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	var seen []core.KernelArg
	p := typedProgram(t, []core.ParamType{core.ParamBuffer, core.ParamFloat64, core.ParamInt64}, recordTwin(&seen))
	buf, err := b.Alloc(64)
	require.NoError(t, err)
	good := []core.Arg{core.ArgBuffer(buf), core.ArgFloat64(1), core.ArgInt64(2)}
	for _, tt := range []struct {
		name  string
		bufs  []core.Buffer
		cfg   core.DispatchConfig
		frags []string
	}{
		{"too few", nil, core.DispatchConfig{Args: good[:2]}, []string{"takes 3 arguments", "got 2"}},
		{"too many", nil, core.DispatchConfig{Args: append(good[:3:3], core.ArgInt8(1))}, []string{"got 4"}},
		{"wrong type", nil, core.DispatchConfig{Args: []core.Arg{core.ArgBuffer(buf), core.ArgFloat32(1), core.ArgInt64(2)}},
			[]string{"argument 1 is float32; the parameter is float64", "ArgFloat64"}},
		{"int32 for int64", nil, core.DispatchConfig{Args: []core.Arg{core.ArgBuffer(buf), core.ArgFloat64(1), core.ArgInt32(2)}},
			[]string{"argument 2 is int32; the parameter is int64", "ArgInt64"}},
		{"unset", nil, core.DispatchConfig{Args: []core.Arg{core.ArgBuffer(buf), {}, core.ArgInt64(2)}}, []string{"argument 1 is unset"}},
		{"offset past end", nil, core.DispatchConfig{Args: []core.Arg{core.ArgBufferAt(buf, 65), core.ArgFloat64(1), core.ArgInt64(2)}},
			[]string{"offset 65 is outside", "64 bytes"}},
		{"negative offset", nil, core.DispatchConfig{Args: []core.Arg{core.ArgBufferAt(buf, -1), core.ArgFloat64(1), core.ArgInt64(2)}},
			[]string{"offset -1"}},
		{"bufs beside args", []core.Buffer{buf}, core.DispatchConfig{Args: good}, []string{"declares typed Params but got 1 Bufs"}},
		{"u32 scalars beside args", nil, core.DispatchConfig{Args: good, Scalars: []uint32{1}}, []string{"1 u32 Scalars"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := dev.Calls(sim.OpLaunch)
			err := b.Dispatch(p, tt.bufs, tt.cfg)
			requireErrKind(t, err, core.ErrInvalidArgument, tt.frags...)
			assert.Equal(t, before, dev.Calls(sim.OpLaunch), "nothing launched")
		})
	}
	// A foreign handle inside Args is refused like any bound buffer.
	requireErrKind(t, b.Dispatch(p, nil, core.DispatchConfig{Args: []core.Arg{core.ArgBuffer(core.Buffer{ID: 1 << 40, Len: 64}), core.ArgFloat64(1), core.ArgInt64(2)}}),
		core.ErrUnknownHandle)
	require.NoError(t, b.Dispatch(p, nil, core.DispatchConfig{Args: good}))
	require.NoError(t, b.Free(buf), "nothing was left in flight")
}

func TestTypedArgsToAU32ProgramAreRefused(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	buf, err := b.Alloc(16)
	require.NoError(t, err)
	// A program of the caller's that takes Bufs and u32 Scalars and
	// declares no typed form (the built-ins declare one: builtinargs_test.go).
	u32, err := core.NewProgram(core.ProgramSpec{Name: "u32", Image: []byte(".entry u32 {}"), Entry: "u32",
		Grid: core.GridRule{Blocks: 1}, Buffers: 1, Scalars: 1, Host: func(core.KernelMemory, core.LaunchConfig, []core.KernelArg) error { return nil }})
	require.NoError(t, err)
	assert.Nil(t, u32.Params())
	before := dev.Calls(sim.OpLaunch)
	err = b.Dispatch(u32, []core.Buffer{buf}, core.DispatchConfig{Scalars: []uint32{1}, Args: []core.Arg{core.ArgUint32(1)}})
	requireErrKind(t, err, core.ErrInvalidArgument, "not typed Args")
	err = b.Dispatch(u32, nil, core.DispatchConfig{Args: []core.Arg{core.ArgBuffer(buf), core.ArgUint32(1)}})
	requireErrKind(t, err, core.ErrInvalidArgument, "not typed Args")
	assert.Equal(t, before, dev.Calls(sim.OpLaunch))
}

func TestTypedProgramSpecRefusals(t *testing.T) {
	base := core.ProgramSpec{Image: []byte(".entry k {}"), Entry: "k", Grid: core.GridRule{Blocks: 1}}
	for name, mod := range map[string]func(*core.ProgramSpec){
		"params and buffers": func(s *core.ProgramSpec) { s.Params, s.Buffers = []core.ParamType{core.ParamBuffer}, 1 },
		"params and scalars": func(s *core.ProgramSpec) { s.Params, s.Scalars = []core.ParamType{core.ParamInt32}, 1 },
		"invalid type":       func(s *core.ProgramSpec) { s.Params = []core.ParamType{core.ParamBuffer, 0} },
		"type past the end":  func(s *core.ProgramSpec) { s.Params = []core.ParamType{core.ParamType(200)} },
		"grid from a scalar": func(s *core.ProgramSpec) {
			s.Params, s.Grid = []core.ParamType{core.ParamInt32, core.ParamBuffer}, core.GridRule{ElemSize: 4, FromBuffer: 1}
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := base
			mod(&s)
			_, err := core.NewProgram(s)
			requireErrKind(t, err, core.ErrInvalidArgument)
		})
	}
}

func TestTypedGridFollowsTheBufferAfterItsOffset(t *testing.T) {
	b, _ := openSim(t, sim.Config{})
	var cfgs []core.LaunchConfig
	host := func(_ core.KernelMemory, cfg core.LaunchConfig, _ []core.KernelArg) error {
		cfgs = append(cfgs, cfg)
		return nil
	}
	p, err := core.NewProgram(core.ProgramSpec{Image: []byte(".entry g {}"), Entry: "g", Block: 32,
		Grid:   core.GridRule{ElemSize: 4, FromBuffer: 1},
		Params: []core.ParamType{core.ParamInt32, core.ParamBuffer, core.ParamBuffer}, Host: host})
	require.NoError(t, err)
	small, err := b.Alloc(4 * 32)
	require.NoError(t, err)
	big, err := b.Alloc(4 * 100)
	require.NoError(t, err)
	// FromBuffer 1 is the second buffer parameter: big, 100 elements, less
	// 36 skipped by the offset: 64 elements, 2 blocks of 32.
	require.NoError(t, b.Dispatch(p, nil, core.DispatchConfig{Args: []core.Arg{core.ArgInt32(0), core.ArgBuffer(small), core.ArgBufferAt(big, 36*4)}}))
	require.Len(t, cfgs, 1)
	assert.Equal(t, uint32(2), cfgs[0].Grid[0])
}

func TestTypedAndU32StepsShareABatch(t *testing.T) {
	b, _ := openSim(t, sim.Config{})
	var seen []core.KernelArg
	p := typedProgram(t, []core.ParamType{core.ParamBuffer, core.ParamUint64}, recordTwin(&seen))
	out, err := b.Alloc(16)
	require.NoError(t, err)
	other, err := b.Alloc(16)
	require.NoError(t, err)
	dst, err := b.Run(core.Batch{
		Steps: []core.Step{
			{Program: core.ProgramFillU32(), Bufs: []core.Buffer{other}, Config: core.DispatchConfig{Scalars: []uint32{7}}},
			{Program: p, Config: core.DispatchConfig{Args: []core.Arg{core.ArgBuffer(out), core.ArgUint64(0x1122334455667788)}}},
		},
		Reads: []core.Range{{Buf: out, Len: 8}, {Buf: other, Len: 4}},
	}, nil)
	require.NoError(t, err)
	assert.Equal(t, uint64(0x1122334455667788), binary.LittleEndian.Uint64(dst[0]))
	assert.Equal(t, uint32(7), binary.LittleEndian.Uint32(dst[1]))
}

func TestParamTypeNamesAndSizes(t *testing.T) {
	sizes := []int{8, 1, 2, 4, 8, 1, 2, 4, 8, 4, 8}
	names := []string{"buffer", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64"}
	for i, pt := range everyType {
		assert.Equal(t, sizes[i], pt.Size(), "%v", pt)
		assert.Equal(t, names[i], pt.String())
	}
	assert.Zero(t, core.ParamType(0).Size())
	assert.Equal(t, "ParamType(99)", core.ParamType(99).String())
}

func TestTypedStepsReplayFromAGraph(t *testing.T) {
	b, _ := openSim(t, sim.Config{})
	var seen []core.KernelArg
	p := typedProgram(t, []core.ParamType{core.ParamBuffer, core.ParamFloat64, core.ParamInt16}, recordTwin(&seen))
	out, err := b.Alloc(32)
	require.NoError(t, err)
	args := []core.Arg{core.ArgBufferAt(out, 8), core.ArgFloat64(-0.5), core.ArgInt16(-2)}
	g, err := b.Capture(core.Batch{
		Steps: []core.Step{{Program: p, Config: core.DispatchConfig{Args: args}}},
		Reads: []core.Range{{Buf: out, Offset: 8, Len: 16}},
	})
	require.NoError(t, err)
	args[1] = core.ArgFloat64(99) // the graph keeps what was captured
	for range 2 {
		dst, err := g.Replay(nil)
		require.NoError(t, err)
		assert.Equal(t, math.Float64bits(-0.5), binary.LittleEndian.Uint64(dst[0]))
		assert.Equal(t, uint64(0xfffe), binary.LittleEndian.Uint64(dst[0][8:]), "an int16 travels zero-extended")
	}
	require.NoError(t, g.Close())
}
