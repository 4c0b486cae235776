package accounting

import "errors"

// Sentinel errors for errors.Is. Every error this package returns is an
// *Error whose Unwrap yields exactly one of them.
var (
	// ErrOverflow reports a result above the largest representable value.
	ErrOverflow = errors.New("overflow")
	// ErrUnderflow reports a subtraction that would go below zero.
	ErrUnderflow = errors.New("underflow")
	// ErrOutOfRange reports a range that ends past its limit.
	ErrOutOfRange = errors.New("out of range")
	// ErrNegative reports a negative length, offset or count.
	ErrNegative = errors.New("negative value")
)

// Error is the error type of this package: Op names the function that
// failed, Err is one of the sentinels, Detail carries the numbers and Fix
// says what the caller should do.
type Error struct {
	Op     string
	Err    error
	Detail string
	Fix    string
}

// Error formats "accounting: op: sentinel: detail. Fix: sentence".
func (e *Error) Error() string {
	msg := "accounting: " + e.Op + ": " + e.Err.Error()
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	if e.Fix != "" {
		msg += ". Fix: " + e.Fix
	}
	return msg
}

// Unwrap returns the sentinel so errors.Is(err, ErrOverflow) and friends work.
func (e *Error) Unwrap() error { return e.Err }

func newError(op string, sentinel error, detail, fix string) error {
	return &Error{Op: op, Err: sentinel, Detail: detail, Fix: fix}
}
