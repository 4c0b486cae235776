package core

import (
	"fmt"
	"math"
)

// Arg is one typed kernel argument, passed in DispatchConfig.Args to a
// Program declared with ProgramSpec.Params. Build it with ArgBuffer,
// ArgBufferAt or the scalar constructors (ArgInt8 ... ArgFloat64); the zero
// Arg is unset and refused.
type Arg struct {
	typ  ParamType
	buf  Buffer
	off  int
	bits uint64 // the scalar's bits, zero-extended
}

// Type returns the argument's type.
func (a Arg) Type() ParamType { return a.typ }

// ArgBuffer passes buf's device address.
func ArgBuffer(buf Buffer) Arg { return Arg{typ: ParamBuffer, buf: buf} }

// ArgBufferAt passes the device address off bytes into buf; off must lie in
// [0, buf.Len]. The kernel sees a pointer to that byte.
func ArgBufferAt(buf Buffer, off int) Arg { return Arg{typ: ParamBuffer, buf: buf, off: off} }

// ArgInt8 passes an int8_t.
func ArgInt8(v int8) Arg { return Arg{typ: ParamInt8, bits: uint64(uint8(v))} }

// ArgInt16 passes an int16_t.
func ArgInt16(v int16) Arg { return Arg{typ: ParamInt16, bits: uint64(uint16(v))} }

// ArgInt32 passes an int32_t.
func ArgInt32(v int32) Arg { return Arg{typ: ParamInt32, bits: uint64(uint32(v))} }

// ArgInt64 passes an int64_t.
func ArgInt64(v int64) Arg { return Arg{typ: ParamInt64, bits: uint64(v)} }

// ArgUint8 passes a uint8_t.
func ArgUint8(v uint8) Arg { return Arg{typ: ParamUint8, bits: uint64(v)} }

// ArgUint16 passes a uint16_t.
func ArgUint16(v uint16) Arg { return Arg{typ: ParamUint16, bits: uint64(v)} }

// ArgUint32 passes a uint32_t.
func ArgUint32(v uint32) Arg { return Arg{typ: ParamUint32, bits: uint64(v)} }

// ArgUint64 passes a uint64_t.
func ArgUint64(v uint64) Arg { return Arg{typ: ParamUint64, bits: v} }

// ArgFloat32 passes a float.
func ArgFloat32(v float32) Arg { return Arg{typ: ParamFloat32, bits: uint64(math.Float32bits(v))} }

// ArgFloat64 passes a double.
func ArgFloat64(v float64) Arg { return Arg{typ: ParamFloat64, bits: math.Float64bits(v)} }

// typed reports whether p was declared with Params.
func (p *Program) typed() bool { return len(p.spec.Params) > 0 }

// checkParams validates a typed spec's parameter list and sets Buffers to
// the number of buffer parameters. op names the caller.
func checkParams(op string, spec *ProgramSpec) error {
	bad := func(detail, fix string) error { return newError(op, KindInvalidArgument, detail, fix) }
	switch {
	case spec.Buffers != 0 || spec.Scalars != 0 || spec.Count:
		return bad(fmt.Sprintf("program %q declares Params and also Buffers=%d, Scalars=%d, Count=%v", spec.Name, spec.Buffers, spec.Scalars, spec.Count),
			"declare every parameter in Params (pass an element count as an ArgUint32 or ArgInt64) and leave Buffers, Scalars and Count zero")
	case len(spec.Params) > maxProgramArgs:
		return bad(fmt.Sprintf("program %q declares %d parameters; at most %d", spec.Name, len(spec.Params), maxProgramArgs),
			"pass fewer parameters, or pack them into a buffer")
	}
	for i, t := range spec.Params {
		if t.Size() == 0 {
			return bad(fmt.Sprintf("program %q parameter %d has no valid type (%v)", spec.Name, i, t),
				"use one of the Param constants (ParamBuffer, ParamInt8 ... ParamFloat64)")
		}
		if t == ParamBuffer {
			spec.Buffers++
		}
	}
	return nil
}

// typedBuffers returns the buffers a typed step binds, in parameter order,
// and refuses a step that also passes Bufs or Scalars.
func (p *Program) typedBuffers(op string, step int, s *Step) ([]Buffer, error) {
	if len(s.Bufs) != 0 || len(s.Config.Scalars) != 0 {
		return nil, newError(op, KindInvalidArgument,
			fmt.Sprintf("%sprogram %q declares typed Params but got %d Bufs and %d u32 Scalars", stepPrefix(step), p.spec.Name, len(s.Bufs), len(s.Config.Scalars)),
			"pass every argument, buffers included, in DispatchConfig.Args")
	}
	var bufs []Buffer
	for _, a := range s.Config.Args {
		if a.typ == ParamBuffer {
			bufs = append(bufs, a.buf)
		}
	}
	return bufs, nil
}

// stepPrefix names a Batch step in messages; a negative step is a single
// dispatch.
func stepPrefix(step int) string {
	if step < 0 {
		return ""
	}
	return fmt.Sprintf("step %d: ", step)
}

// checkTyped validates a typed dispatch's arguments against the declared
// Params (count, type, buffer offset) and returns its launch geometry.
func (p *Program) checkTyped(op string, step int, cfg *DispatchConfig) (LaunchConfig, error) {
	bad := func(detail, fix string) (LaunchConfig, error) {
		return LaunchConfig{}, newError(op, KindInvalidArgument, stepPrefix(step)+detail, fix)
	}
	if !p.typed() {
		return bad(fmt.Sprintf("program %q takes buffers and u32 Scalars, not typed Args (got %d)", p.spec.Name, len(cfg.Args)),
			"pass Bufs and DispatchConfig.Scalars, or declare ProgramSpec.Params to pass typed Args")
	}
	if len(cfg.Args) != len(p.spec.Params) {
		return bad(fmt.Sprintf("program %q takes %d arguments %v but got %d", p.spec.Name, len(p.spec.Params), p.spec.Params, len(cfg.Args)),
			"pass exactly one Arg per declared parameter, in order")
	}
	elements := 0
	nb := 0
	for i, a := range cfg.Args {
		if want := p.spec.Params[i]; a.typ != want {
			return bad(fmt.Sprintf("program %q argument %d is %v; the parameter is %v", p.spec.Name, i, a.typ, want),
				fmt.Sprintf("pass argument %d with the constructor of its type (Arg%s)", i, argCtor(want)))
		}
		if a.typ != ParamBuffer {
			continue
		}
		if a.off < 0 || a.off > a.buf.Len {
			return bad(fmt.Sprintf("program %q argument %d: offset %d is outside handle %d's %d bytes", p.spec.Name, i, a.off, a.buf.ID, a.buf.Len),
				"pass an offset in [0, buffer length]")
		}
		if g := p.spec.Grid; g.ElemSize > 0 && nb == g.FromBuffer {
			elements = (a.buf.Len - a.off) / g.ElemSize
		}
		nb++
	}
	if cfg.Grid > MaxGridBlocks {
		return bad(fmt.Sprintf("grid override of %d blocks; the limit is %d", cfg.Grid, MaxGridBlocks),
			"pass a smaller grid, or 0 for the program's rule")
	}
	grid := cfg.Grid
	if grid == 0 {
		grid = p.blocks(elements)
	}
	return LaunchConfig{Grid: [3]uint32{grid, 1, 1}, Block: [3]uint32{p.spec.Block, 1, 1}}, nil
}

// argCtor names the constructor suffix for t.
func argCtor(t ParamType) string {
	switch t {
	case ParamBuffer:
		return "Buffer"
	case ParamFloat32:
		return "Float32"
	case ParamFloat64:
		return "Float64"
	}
	s := t.String()
	if s == "" || t >= numParamTypes {
		return "?"
	}
	return string(s[0]-'a'+'A') + s[1:]
}

// fillTyped writes a typed step's kernel arguments; ents are the step's
// bound buffers' entries, in order.
func fillTyped(dst []KernelArg, args []Arg, ents []*residentEntry) {
	nb := 0
	for k, a := range args {
		if a.typ == ParamBuffer {
			dst[k] = KernelArg{Ptr: ents[nb].ptr + uint64(a.off), IsPtr: true, Type: ParamBuffer}
			nb++
			continue
		}
		dst[k] = KernelArg{Type: a.typ, Bits: a.bits, U32: uint32(a.bits)}
	}
}
