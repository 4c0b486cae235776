// Package errs holds the one error type of core and its drivers: Error,
// its Kind, the sentinels errors.Is matches, and the constructors that
// build an Error with exactly one Fix sentence, including the sentence for
// each class of CUDA driver result (driverfix.go). Package core aliases
// Error, Kind, the kinds and the sentinels, so they are core.Error,
// core.KindBudget, core.ErrBudget to users. It knows nothing of a Backend.
package errs

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
	KindOwned                           // the buffer belongs to an OptimizerDispatcher: free it through the dispatcher
)

var kindNames = [...]string{
	KindInvalidArgument: "invalid argument",
	KindBudget:          "budget exceeded",
	KindUnknownHandle:   "unknown handle",
	KindInFlight:        "in flight",
	KindDriver:          "driver failure",
	KindUnsupported:     "unsupported",
	KindClosed:          "closed",
	KindOwned:           "owned by an optimizer dispatcher",
}

// String returns the kind's name as it appears in messages.
func (k Kind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown kind"
}

// Error is the one error type the core packages return. Op names the
// operation ("Alloc"), Kind classifies the failure, Code is the
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

// Error formats "op: kind: detail (driver code): cause. Fix: sentence". The
// cause's own text is included (a sim detail, a Go twin's error, an
// accounting failure), without any Fix sentence of its own, so the message
// carries exactly one.
func (e *Error) Error() string {
	if e == nil {
		return "vyrecuda: <nil *core.Error>"
	}
	var b strings.Builder
	b.WriteString("vyrecuda: ")
	e.writeBody(&b)
	if e.Fix != "" {
		b.WriteString(". Fix: ")
		b.WriteString(e.Fix)
	}
	return b.String()
}

// writeBody writes everything but the "vyrecuda: " prefix and the Fix.
func (e *Error) writeBody(b *strings.Builder) {
	if e.Op != "" {
		b.WriteString(e.Op)
		b.WriteString(": ")
	}
	b.WriteString(e.Kind.String())
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	code := ""
	if e.Kind == KindDriver && e.Code != 0 {
		code = e.Code.Error()
		b.WriteString(" (")
		b.WriteString(code)
		b.WriteString(")")
	}
	if e.Err != nil {
		if c := causeText(e.Err); c != "" && c != code {
			b.WriteString(": ")
			b.WriteString(c)
		}
	}
}

// causeText is err's message without a Fix sentence of its own: a nested
// *Error contributes its body, any other error its text cut at " Fix: ".
func causeText(err error) string {
	if ce, ok := err.(*Error); ok {
		var b strings.Builder
		ce.writeBody(&b)
		return b.String()
	}
	s := err.Error()
	if i := strings.Index(s, " Fix: "); i >= 0 {
		s = strings.TrimRight(s[:i], ". ")
	}
	return s
}

// WithOp returns err with its Op replaced by op when it is an *Error naming
// another operation: errors of internal calls reach the caller under the
// name of the call the caller made. The original is not modified (it may
// be shared, e.g. a Pending's settled failure).
func WithOp(op string, err error) error {
	e, ok := err.(*Error)
	if !ok || e == nil || e.Op == op || e.isSentinel() {
		return err
	}
	c := *e
	c.Op = op
	return &c
}

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error {
	if e == nil {
		return nil
	}
	return e.Err
}

// Is reports whether target is the sentinel of e's kind, so
// errors.Is(err, core.ErrBudget) works for every budget failure.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok || e == nil || t == nil {
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
	ErrOwned           = &Error{Kind: KindOwned}
)

// New builds an *Error; detail should carry the numbers involved.
func New(op string, kind Kind, detail, fix string) *Error {
	return &Error{Op: op, Kind: kind, Detail: detail, Fix: fix}
}

// Driver wraps an error returned by a Driver call. The CUDA result code
// is extracted with errors.As when the driver supplied one, and picks the
// Fix sentence for its class of failure (driverfix.go).
func Driver(op, call string, err error) *Error {
	e := &Error{Op: op, Kind: KindDriver, Detail: call + " failed", Err: err}
	var r cudaapi.Result
	if errors.As(err, &r) {
		e.Code = r
	}
	e.Fix = driverFix(e.Code)
	return e
}

// NullSuccess reports a driver call that returned success with a null
// handle or pointer, which the Backend never accepts.
func NullSuccess(op, call string) *Error {
	return &Error{Op: op, Kind: KindDriver, Detail: call + " returned success with a null result",
		Fix: "the driver misbehaved; report it with the driver version, and retry the call"}
}

// ClosedPool reports a request to a pool (what names it) whose Backend
// was closed.
func ClosedPool(op, what string) *Error {
	return &Error{Op: op, Kind: KindClosed, Detail: what + " is closed",
		Fix: "open a new Backend; a closed one hands out nothing"}
}

// Graph wraps a failed graph call: a driver without the entry point is
// KindUnsupported naming it, anything else KindDriver (as Driver does).
func Graph(op, call string, err error) *Error {
	if errors.Is(err, cudaapi.ErrMissingSymbol) || errors.Is(err, cudaapi.CUDA_ERROR_NOT_SUPPORTED) {
		return &Error{Op: op, Kind: KindUnsupported, Err: err,
			Detail: call + " is not available from this driver",
			Fix:    "update the NVIDIA driver to one with CUDA graphs (CUDA 11.4 or newer), or use Run"}
	}
	return Driver(op, call, err)
}
