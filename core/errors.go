package core

import (
	"errors"
	"strings"

	"github.com/vyre-go/vyrecuda/cudaapi"
)

// Kind classifies an Error so callers can branch with errors.Is on the
// sentinels below instead of matching message text.
type Kind int

// The kinds of failure a Backend reports.
const (
	KindInvalidArgument Kind = iota + 1 // bad input: zero or negative sizes, ranges, lengths
	KindBudget                          // the request does not fit the byte budget
	KindUnknownHandle                   // unknown, foreign, freed or drifted handle
	KindInFlight                        // the resource is bound to unfinished work
	KindDriver                          // the driver returned a failure (Code holds it)
	KindUnsupported                     // the driver or device lacks the capability
	KindClosed                          // the Backend (or object) is closed
)

var kindNames = [...]string{
	KindInvalidArgument: "invalid argument",
	KindBudget:          "budget exceeded",
	KindUnknownHandle:   "unknown handle",
	KindInFlight:        "in flight",
	KindDriver:          "driver failure",
	KindUnsupported:     "unsupported",
	KindClosed:          "closed",
}

// String returns the kind's name as it appears in messages.
func (k Kind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown kind"
}

// Error is the one error type the core packages return. Op names the
// operation ("AllocateResident"), Kind classifies the failure, Code is the
// driver's result when Kind is KindDriver, Detail carries the numbers
// involved, and Fix tells the caller what to do about it.
type Error struct {
	Op     string
	Kind   Kind
	Code   cudaapi.Result
	Detail string
	Fix    string
	Err    error // underlying cause, if any
}

// Error formats "op: kind: detail (driver code): Fix: sentence".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("vyrecuda: ")
	if e.Op != "" {
		b.WriteString(e.Op)
		b.WriteString(": ")
	}
	b.WriteString(e.Kind.String())
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	if e.Kind == KindDriver && e.Code != 0 {
		b.WriteString(" (")
		b.WriteString(e.Code.Error())
		b.WriteString(")")
	} else if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	if e.Fix != "" {
		b.WriteString(". Fix: ")
		b.WriteString(e.Fix)
	}
	return b.String()
}

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is the sentinel of e's kind, so
// errors.Is(err, core.ErrBudget) works for every budget failure.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	return t.isSentinel() && t.Kind == e.Kind
}

func (e *Error) isSentinel() bool {
	return e.Op == "" && e.Detail == "" && e.Fix == "" && e.Err == nil && e.Code == 0
}

// Sentinels for errors.Is, one per Kind.
var (
	ErrInvalidArgument = &Error{Kind: KindInvalidArgument}
	ErrBudget          = &Error{Kind: KindBudget}
	ErrUnknownHandle   = &Error{Kind: KindUnknownHandle}
	ErrInFlight        = &Error{Kind: KindInFlight}
	ErrDriver          = &Error{Kind: KindDriver}
	ErrUnsupported     = &Error{Kind: KindUnsupported}
	ErrClosed          = &Error{Kind: KindClosed}
)

// newError builds an *Error; detail should carry the numbers involved.
func newError(op string, kind Kind, detail, fix string) *Error {
	return &Error{Op: op, Kind: kind, Detail: detail, Fix: fix}
}

// driverError wraps an error returned by a Driver call. The CUDA result code
// is extracted with errors.As when the driver supplied one.
func driverError(op, call string, err error) *Error {
	e := &Error{Op: op, Kind: KindDriver, Detail: call + " failed", Err: err,
		Fix: "check the device state and the driver result; retry after freeing device resources if it reports out of memory"}
	var r cudaapi.Result
	if errors.As(err, &r) {
		e.Code = r
	}
	return e
}

// nullSuccess reports a driver call that returned success with a null
// handle or pointer, which the Backend never accepts.
func nullSuccess(op, call string) *Error {
	return &Error{Op: op, Kind: KindDriver, Detail: call + " returned success with a null result",
		Fix: "the driver misbehaved; report it with the driver version, and retry the call"}
}
