package driver

import (
	"fmt"
	"math"
)

// ParamType is the C type of one kernel parameter of a Program declared with
// core's ProgramSpec.Params.
type ParamType uint8

// The parameter types: a device pointer into a bound buffer, and every C
// scalar type. The zero ParamType is no type (an unset Arg).
const (
	ParamBuffer  ParamType = iota + 1 // T* into a resident buffer, at an optional byte offset
	ParamInt8                         // int8_t / signed char
	ParamInt16                        // int16_t / short
	ParamInt32                        // int32_t / int
	ParamInt64                        // int64_t / long long
	ParamUint8                        // uint8_t / unsigned char
	ParamUint16                       // uint16_t / unsigned short
	ParamUint32                       // uint32_t / unsigned int
	ParamUint64                       // uint64_t / unsigned long long
	ParamFloat32                      // float
	ParamFloat64                      // double
)

// numParamTypes bounds the ParamType constants.
const numParamTypes = ParamFloat64 + 1

var paramTypeNames = [numParamTypes]string{"unset", "buffer", "int8", "int16", "int32", "int64",
	"uint8", "uint16", "uint32", "uint64", "float32", "float64"}

// String returns the type's Go-style name ("buffer", "int64", "float32").
func (t ParamType) String() string {
	if t < numParamTypes {
		return paramTypeNames[t]
	}
	return fmt.Sprintf("ParamType(%d)", uint8(t))
}

// Size returns the bytes the kernel receives for the parameter: 8 for a
// buffer (a device pointer), the scalar's size otherwise, 0 for an invalid
// type.
func (t ParamType) Size() int {
	switch t {
	case ParamInt8, ParamUint8:
		return 1
	case ParamInt16, ParamUint16:
		return 2
	case ParamInt32, ParamUint32, ParamFloat32:
		return 4
	case ParamBuffer, ParamInt64, ParamUint64, ParamFloat64:
		return 8
	}
	return 0
}

// KernelArg is one kernel parameter: a device pointer or a scalar. Programs
// with u32 scalars leave Type zero and set U32; Programs declared with
// core's ProgramSpec.Params set Type and Bits (and U32 to Bits' low 32
// bits). A Go twin reads scalars with the accessors (Int64, Float64, ...).
type KernelArg struct {
	Ptr   uint64 // device address when IsPtr
	U32   uint32 // scalar value when !IsPtr
	IsPtr bool
	Type  ParamType // the parameter's declared type; 0 for a u32 of an untyped Program
	Bits  uint64    // a typed scalar's bits, zero-extended from its size
}

// The accessors below read a KernelArg in a Go twin. Each reinterprets the
// argument's low bits as its own type, so read an argument with the accessor
// its Type names. A u32 scalar of an untyped Program (Type 0) reads as
// Uint32 (or Int32, Float32).

// raw returns the argument's scalar bits.
func (a KernelArg) raw() uint64 {
	if a.Type == 0 && !a.IsPtr {
		return uint64(a.U32)
	}
	return a.Bits
}

// Int8 reads an int8_t argument.
func (a KernelArg) Int8() int8 { return int8(a.raw()) }

// Int16 reads an int16_t argument.
func (a KernelArg) Int16() int16 { return int16(a.raw()) }

// Int32 reads an int32_t argument.
func (a KernelArg) Int32() int32 { return int32(a.raw()) }

// Int64 reads an int64_t argument.
func (a KernelArg) Int64() int64 { return int64(a.raw()) }

// Uint8 reads a uint8_t argument.
func (a KernelArg) Uint8() uint8 { return uint8(a.raw()) }

// Uint16 reads a uint16_t argument.
func (a KernelArg) Uint16() uint16 { return uint16(a.raw()) }

// Uint32 reads a uint32_t argument.
func (a KernelArg) Uint32() uint32 { return uint32(a.raw()) }

// Uint64 reads a uint64_t argument.
func (a KernelArg) Uint64() uint64 { return a.raw() }

// Float32 reads a float argument.
func (a KernelArg) Float32() float32 { return math.Float32frombits(uint32(a.raw())) }

// Float64 reads a double argument.
func (a KernelArg) Float64() float64 { return math.Float64frombits(a.raw()) }

// Slot returns the 8-byte parameter slot a driver copies the argument
// from: the address for a pointer, the scalar's bits otherwise (CUDA hosts
// are little-endian, so a narrower scalar sits in the slot's first bytes).
func (a KernelArg) Slot() uint64 {
	if a.IsPtr {
		return a.Ptr
	}
	return a.raw()
}
