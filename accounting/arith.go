package accounting

import (
	"fmt"
	"math"
)

const (
	fixOverflow  = "split the request into smaller parts; the total does not fit in 64 bits"
	fixIntOver   = "split the request into smaller parts; the total does not fit in an int"
	fixUnderflow = "release only what was reserved; the accounting is out of step with the live state"
	fixNegative  = "pass non-negative lengths and offsets"
	fixRange     = "keep offset+length within the buffer's length"
)

// AddUint64 returns a+b, or an ErrOverflow error when the sum does not fit
// in a uint64.
func AddUint64(a, b uint64) (uint64, error) {
	s := a + b
	if s < a {
		return 0, newError("AddUint64", ErrOverflow, fmt.Sprintf("%d + %d exceeds %d", a, b, uint64(math.MaxUint64)), fixOverflow)
	}
	return s, nil
}

// SubUint64 returns a-b, or an ErrUnderflow error when b > a.
func SubUint64(a, b uint64) (uint64, error) {
	if b > a {
		return 0, newError("SubUint64", ErrUnderflow, fmt.Sprintf("%d - %d is below zero", a, b), fixUnderflow)
	}
	return a - b, nil
}

// AddLen returns a+b for non-negative lengths: ErrNegative when either is
// negative, ErrOverflow when the sum does not fit in an int.
func AddLen(a, b int) (int, error) {
	if a < 0 || b < 0 {
		return 0, newError("AddLen", ErrNegative, fmt.Sprintf("%d + %d has a negative operand", a, b), fixNegative)
	}
	if a > math.MaxInt-b {
		return 0, newError("AddLen", ErrOverflow, fmt.Sprintf("%d + %d exceeds %d", a, b, math.MaxInt), fixIntOver)
	}
	return a + b, nil
}

// SubLen returns a-b for non-negative lengths: ErrNegative when either is
// negative, ErrUnderflow when b > a.
func SubLen(a, b int) (int, error) {
	if a < 0 || b < 0 {
		return 0, newError("SubLen", ErrNegative, fmt.Sprintf("%d - %d has a negative operand", a, b), fixNegative)
	}
	if b > a {
		return 0, newError("SubLen", ErrUnderflow, fmt.Sprintf("%d - %d is below zero", a, b), fixUnderflow)
	}
	return a - b, nil
}

// LenUint64 converts a non-negative length to uint64, or returns an
// ErrNegative error.
func LenUint64(n int) (uint64, error) {
	if n < 0 {
		return 0, newError("LenUint64", ErrNegative, fmt.Sprintf("length %d", n), fixNegative)
	}
	return uint64(n), nil
}

// RangeEnd returns offset+length after checking that both are non-negative
// (ErrNegative), that the sum fits in an int (ErrOverflow) and that the
// range ends at or before limit (ErrOutOfRange). A negative limit is an
// ErrNegative error.
func RangeEnd(offset, length, limit int) (int, error) {
	if offset < 0 || length < 0 || limit < 0 {
		return 0, newError("RangeEnd", ErrNegative,
			fmt.Sprintf("offset %d, length %d, limit %d", offset, length, limit), fixNegative)
	}
	if offset > math.MaxInt-length {
		return 0, newError("RangeEnd", ErrOverflow,
			fmt.Sprintf("offset %d + length %d exceeds %d", offset, length, math.MaxInt), fixIntOver)
	}
	end := offset + length
	if end > limit {
		return 0, newError("RangeEnd", ErrOutOfRange,
			fmt.Sprintf("range [%d, %d) ends past limit %d", offset, end, limit), fixRange)
	}
	return end, nil
}

// AddPtr returns the address ptr+off for a non-negative byte offset:
// ErrNegative when off < 0, ErrOverflow when the address wraps.
func AddPtr(ptr uint64, off int) (uint64, error) {
	if off < 0 {
		return 0, newError("AddPtr", ErrNegative, fmt.Sprintf("address %#x + offset %d", ptr, off), fixNegative)
	}
	p := ptr + uint64(off)
	if p < ptr {
		return 0, newError("AddPtr", ErrOverflow,
			fmt.Sprintf("address %#x + offset %d wraps past %#x", ptr, off, uint64(math.MaxUint64)),
			"pass an offset inside the allocation the address belongs to")
	}
	return p, nil
}
