package proptest

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"testing"

	"github.com/leanovate/gopter"
	"github.com/leanovate/gopter/gen"
	"github.com/leanovate/gopter/prop"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// typedCase is one generated typed dispatch: the declared scalar types after
// a leading buffer, raw bits for each value, a byte offset into the buffer,
// and how the arguments are spoiled (0: not at all).
type typedCase struct {
	N        int   // scalars declared: the first N of Types
	Types    []int // ParamInt8 .. ParamFloat64, as indexes 0..9
	Raw      []uint64
	Offset   int
	Mutation int // 0 none, 1 drop the last argument, 2 retype one, 3 append one
	Pos      int
}

var scalarTypes = []core.ParamType{core.ParamInt8, core.ParamInt16, core.ParamInt32, core.ParamInt64,
	core.ParamUint8, core.ParamUint16, core.ParamUint32, core.ParamUint64, core.ParamFloat32, core.ParamFloat64}

// argOf builds the Arg of type t from raw bits, as a caller would from a Go
// value of that type.
func argOf(t core.ParamType, raw uint64) core.Arg {
	switch t {
	case core.ParamInt8:
		return core.ArgInt8(int8(raw))
	case core.ParamInt16:
		return core.ArgInt16(int16(raw))
	case core.ParamInt32:
		return core.ArgInt32(int32(raw))
	case core.ParamInt64:
		return core.ArgInt64(int64(raw))
	case core.ParamUint8:
		return core.ArgUint8(uint8(raw))
	case core.ParamUint16:
		return core.ArgUint16(uint16(raw))
	case core.ParamUint32:
		return core.ArgUint32(uint32(raw))
	case core.ParamUint64:
		return core.ArgUint64(raw)
	case core.ParamFloat32:
		return core.ArgFloat32(math.Float32frombits(uint32(raw)))
	}
	return core.ArgFloat64(math.Float64frombits(raw))
}

// sameValue reports whether the twin's view of a equals the Go value the
// caller passed, read with the accessor of the declared type (floats by bits,
// so NaNs compare).
func sameValue(t core.ParamType, a core.KernelArg, raw uint64) bool {
	switch t {
	case core.ParamInt8:
		return a.Int8() == int8(raw)
	case core.ParamInt16:
		return a.Int16() == int16(raw)
	case core.ParamInt32:
		return a.Int32() == int32(raw)
	case core.ParamInt64:
		return a.Int64() == int64(raw)
	case core.ParamUint8:
		return a.Uint8() == uint8(raw)
	case core.ParamUint16:
		return a.Uint16() == uint16(raw)
	case core.ParamUint32:
		return a.Uint32() == uint32(raw)
	case core.ParamUint64:
		return a.Uint64() == raw
	case core.ParamFloat32:
		return math.Float32bits(a.Float32()) == uint32(raw)
	}
	return math.Float64bits(a.Float64()) == raw
}

// TestTypedArgsProperties checks, over generated typed dispatches, that a
// dispatch runs exactly when its arguments match the declared types, and that
// the kernel then sees the caller's values and the buffer offset.
func TestTypedArgsProperties(t *testing.T) {
	dev := sim.New(sim.Config{TotalMemory: 16 << 20})
	b, err := core.Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
		sim.RequireNoLeaks(t, dev)
	}()
	buf, err := b.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	var seen []core.KernelArg
	twin := func(mem core.KernelMemory, _ core.LaunchConfig, args []core.KernelArg) error {
		seen = append(seen[:0], args...)
		p, err := mem.Bytes(args[0].Ptr, 1) // the kernel's pointer, offset included
		if err == nil {
			p[0]++
		}
		return err
	}

	props := gopter.NewProperties(propParameters(t, 300))
	props.Property("a typed dispatch runs iff its arguments match the declaration, and the kernel sees the caller's values",
		prop.ForAll(func(c typedCase) string {
			c.Types = c.Types[:c.N]
			params, args := typedParamsAndArgs(buf, c)
			p, err := core.NewProgram(core.ProgramSpec{Image: []byte(".entry k {}"), Entry: "k", Grid: core.GridRule{Blocks: 1}, Params: params, Host: twin})
			if err != nil {
				return "NewProgram: " + err.Error()
			}
			args = spoilTypedArgs(c, args)
			before, err := b.Download(buf.All(), nil)
			if err != nil {
				return err.Error()
			}
			launches := dev.Calls(sim.OpLaunch)
			err = b.Dispatch(p, nil, core.DispatchConfig{Args: args})
			after, rerr := b.Download(buf.All(), nil)
			if rerr != nil {
				return rerr.Error()
			}
			if c.Mutation != 0 {
				return checkTypedRefusal(c, err, dev, launches, before, after)
			}
			return checkTypedAccepted(c, err, seen, len(params), before, after)
		}, typedCaseGen()))
	props.TestingRun(t)
}

// typedCaseGen generates typed dispatches of one to seven scalars after the
// buffer, with any offset into the 64-byte buffer and any spoiling.
func typedCaseGen() gopter.Gen {
	return gen.Struct(reflect.TypeOf(typedCase{}), map[string]gopter.Gen{
		"N":        gen.IntRange(1, 7),
		"Types":    gen.SliceOfN(7, gen.IntRange(0, len(scalarTypes)-1)),
		"Raw":      gen.SliceOfN(8, gen.UInt64()),
		"Offset":   gen.IntRange(0, 63),
		"Mutation": gen.IntRange(0, 3),
		"Pos":      gen.IntRange(0, 6),
	})
}

// typedParamsAndArgs declares a buffer then c's scalar types, and builds the
// matching arguments: buf at c's offset, then each scalar from its raw bits.
func typedParamsAndArgs(buf core.Buffer, c typedCase) ([]core.ParamType, []core.Arg) {
	params := []core.ParamType{core.ParamBuffer}
	args := []core.Arg{core.ArgBufferAt(buf, c.Offset)}
	for i, ti := range c.Types {
		params = append(params, scalarTypes[ti])
		args = append(args, argOf(scalarTypes[ti], c.Raw[i]))
	}
	return params, args
}

// spoilTypedArgs applies c's mutation to args: drop the last argument,
// retype the one at c.Pos to a neighbouring type, or append an extra one.
func spoilTypedArgs(c typedCase, args []core.Arg) []core.Arg {
	pos := 1 + c.Pos%len(c.Types)
	switch c.Mutation {
	case 1:
		args = args[:len(args)-1]
	case 2: // a neighbouring type, never the declared one
		k := (int(args[pos].Type()) - int(core.ParamInt8) + 1) % len(scalarTypes)
		args[pos] = argOf(scalarTypes[k], c.Raw[pos-1])
	case 3:
		args = append(args, core.ArgInt8(1))
	}
	return args
}

// checkTypedRefusal checks a dispatch with spoiled arguments was refused as
// an invalid argument, launched nothing and left device memory alone.
func checkTypedRefusal(c typedCase, err error, dev *sim.Device, launches uint64, before, after []byte) string {
	switch {
	case !errors.Is(err, core.ErrInvalidArgument):
		return fmt.Sprintf("spoiled arguments (mutation %d) were not refused: %v", c.Mutation, err)
	case dev.Calls(sim.OpLaunch) != launches:
		return "a refused dispatch launched"
	case string(before) != string(after):
		return "a refused dispatch changed device memory"
	}
	return ""
}

// checkTypedAccepted checks a dispatch with matching arguments ran, the
// kernel saw every argument with the caller's value, and only the byte at
// c's offset changed, by one.
func checkTypedAccepted(c typedCase, err error, seen []core.KernelArg, nParams int, before, after []byte) string {
	if err != nil {
		return "matching arguments refused: " + err.Error()
	}
	if len(seen) != nParams {
		return fmt.Sprintf("kernel saw %d arguments, want %d", len(seen), nParams)
	}
	for i, ti := range c.Types {
		if !sameValue(scalarTypes[ti], seen[i+1], c.Raw[i]) {
			return fmt.Sprintf("argument %d (%v): kernel saw bits %#x, caller passed %#x", i+1, scalarTypes[ti], seen[i+1].Bits, c.Raw[i])
		}
	}
	for i := range after {
		want := before[i]
		if i == c.Offset {
			want++
		}
		if after[i] != want {
			return fmt.Sprintf("byte %d changed to %d, want %d: the pointer did not carry offset %d", i, after[i], want, c.Offset)
		}
	}
	return ""
}
