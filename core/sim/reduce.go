package sim

import (
	"encoding/binary"
	"math"

	"github.com/vyre-go/vyrecuda/core/driver"
)

// reduceBytes reduces equal-length little-endian arrays of dt element-wise
// with red. Integers wrap as the device's fixed-width arithmetic does (an
// average divides the wrapped sum, truncating); floating-point elements are
// reduced in float64 and rounded once to dt.
func reduceBytes(dt driver.DataType, red driver.ReduceOp, in [][]byte) []byte {
	size := dt.Size()
	out := make([]byte, len(in[0]))
	for off := 0; off < len(out); off += size {
		if isFloat(dt) {
			acc := getFloat(dt, in[0][off:])
			for _, b := range in[1:] {
				acc = combineFloat(red, acc, getFloat(dt, b[off:]))
			}
			if red == driver.ReduceAvg {
				acc /= float64(len(in))
			}
			putFloat(dt, out[off:], acc)
			continue
		}
		acc := getInt(dt, in[0][off:])
		for _, b := range in[1:] {
			acc = combineInt(dt, red, acc, getInt(dt, b[off:]))
		}
		if red == driver.ReduceAvg {
			acc = avgInt(dt, acc, len(in))
		}
		putInt(dt, out[off:], acc)
	}
	return out
}

func isFloat(dt driver.DataType) bool {
	return dt == driver.DataFloat16 || dt == driver.DataFloat32 || dt == driver.DataFloat64 || dt == driver.DataBFloat16
}

func signed(dt driver.DataType) bool {
	return dt == driver.DataInt8 || dt == driver.DataInt32 || dt == driver.DataInt64
}

func combineFloat(red driver.ReduceOp, a, b float64) float64 {
	switch red {
	case driver.ReduceProd:
		return a * b
	case driver.ReduceMax:
		return math.Max(a, b)
	case driver.ReduceMin:
		return math.Min(a, b)
	}
	return a + b // sum and avg
}

// getInt reads one element as uint64 bits, sign-extended for signed types.
func getInt(dt driver.DataType, b []byte) uint64 {
	switch dt {
	case driver.DataInt8:
		return uint64(int64(int8(b[0])))
	case driver.DataUint8:
		return uint64(b[0])
	case driver.DataInt32:
		return uint64(int64(int32(binary.LittleEndian.Uint32(b))))
	case driver.DataUint32:
		return uint64(binary.LittleEndian.Uint32(b))
	}
	return binary.LittleEndian.Uint64(b)
}

func putInt(dt driver.DataType, b []byte, v uint64) {
	switch dt.Size() {
	case 1:
		b[0] = byte(v)
	case 4:
		binary.LittleEndian.PutUint32(b, uint32(v))
	default:
		binary.LittleEndian.PutUint64(b, v)
	}
}

func combineInt(dt driver.DataType, red driver.ReduceOp, a, b uint64) uint64 {
	switch red {
	case driver.ReduceProd:
		return a * b
	case driver.ReduceMax, driver.ReduceMin:
		less := a < b
		if signed(dt) {
			less = int64(a) < int64(b)
		}
		if less == (red == driver.ReduceMin) {
			return a
		}
		return b
	}
	return a + b
}

// avgInt divides a wrapped sum by n in the element's own width.
func avgInt(dt driver.DataType, sum uint64, n int) uint64 {
	bits := uint(dt.Size() * 8)
	if signed(dt) {
		v := int64(sum<<(64-bits)) >> (64 - bits)
		return uint64(v / int64(n))
	}
	if bits < 64 {
		sum &= 1<<bits - 1
	}
	return sum / uint64(n)
}

func getFloat(dt driver.DataType, b []byte) float64 {
	switch dt {
	case driver.DataFloat16:
		return float64(halfToFloat(binary.LittleEndian.Uint16(b)))
	case driver.DataBFloat16:
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b)) << 16))
	case driver.DataFloat32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(b))
}

func putFloat(dt driver.DataType, b []byte, v float64) {
	switch dt {
	case driver.DataFloat16:
		binary.LittleEndian.PutUint16(b, floatToHalf(float32(v)))
	case driver.DataBFloat16:
		binary.LittleEndian.PutUint16(b, floatToBFloat(float32(v)))
	case driver.DataFloat32:
		binary.LittleEndian.PutUint32(b, math.Float32bits(float32(v)))
	default:
		binary.LittleEndian.PutUint64(b, math.Float64bits(v))
	}
}

// halfToFloat widens an IEEE 754 binary16 value.
func halfToFloat(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // inf, nan
		return math.Float32frombits(sign | 0xff<<23 | man<<13)
	case exp == 0 && man == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: value man * 2^-24
		f := float32(man) * (1.0 / (1 << 24))
		if sign != 0 {
			return -f
		}
		return f
	}
	return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
}

// floatToHalf rounds to the nearest binary16, ties to even.
func floatToHalf(f float32) uint16 {
	bits := math.Float32bits(f)
	sign := uint16(bits>>16) & 0x8000
	a := math.Abs(float64(f))
	switch {
	case math.IsNaN(float64(f)):
		return sign | 0x7e00
	case a >= 65520: // rounds past the largest half
		return sign | 0x7c00
	case a < 6.103515625e-05: // subnormal or zero: multiples of 2^-24
		q := math.RoundToEven(a * (1 << 24))
		return sign | uint16(q)
	}
	exp := int(bits>>23&0xff) - 127 + 15
	man := bits & 0x7fffff
	// Round the 23-bit mantissa to 10 bits, ties to even; a carry bumps the exponent.
	half := uint32(exp)<<10 | man>>13
	rest := man & 0x1fff
	if rest > 0x1000 || rest == 0x1000 && half&1 == 1 {
		half++
	}
	return sign | uint16(half)
}

// floatToBFloat rounds to the nearest bfloat16, ties to even.
func floatToBFloat(f float32) uint16 {
	bits := math.Float32bits(f)
	if math.IsNaN(float64(f)) {
		return uint16(bits>>16) | 0x40
	}
	bits += 0x7fff + (bits>>16)&1
	return uint16(bits >> 16)
}
