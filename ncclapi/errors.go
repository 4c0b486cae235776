package ncclapi

import (
	"errors"
	"fmt"
	"strconv"
)

// ErrLibraryNotFound is returned by every call when libnccl cannot be loaded
// (NCCL not installed, a bad $VYRECUDA_LIBNCCL, or a build without cgo).
var ErrLibraryNotFound = errors.New("ncclapi: NCCL library not found")

// ErrMissingSymbol matches, through errors.Is, every *MissingSymbolError.
var ErrMissingSymbol = errors.New("ncclapi: NCCL entry point missing")

// MissingSymbolError reports an entry point the loaded libnccl does not
// export (an older NCCL than the header the bindings came from). Only calls
// of that entry point fail.
type MissingSymbolError struct {
	Symbol string // the symbol looked up, e.g. ncclCommAbort
	Err    error  // the loader's reason, when it gave one
}

// Error names the symbol and says what to do.
func (e *MissingSymbolError) Error() string {
	msg := "ncclapi: libnccl has no symbol " + e.Symbol + " (bindings generated from NCCL_VERSION_CODE " +
		strconv.Itoa(HeaderVersion) + ")"
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg + "; Fix: install a newer NCCL, or avoid this call with this library"
}

// Is makes errors.Is(err, ErrMissingSymbol) true.
func (e *MissingSymbolError) Is(target error) bool { return target == ErrMissingSymbol }

// Unwrap returns the loader's reason.
func (e *MissingSymbolError) Unwrap() error { return e.Err }

// Name returns the nccl.h enumerator name of r, such as ncclInvalidUsage, or
// ncclResult_t(N) for a value the header does not know.
func (r Result) Name() string {
	if n, ok := resultName(r); ok {
		return n
	}
	return "ncclResult_t(" + strconv.Itoa(int(r)) + ")"
}

// String returns r's enumerator name.
func (r Result) String() string { return r.Name() }

// Error returns r's enumerator name and what it means.
func (r Result) Error() string {
	if d, ok := resultText[r]; ok {
		return r.Name() + ": " + d
	}
	return r.Name()
}

// resultText says what each status means, in this project's words.
var resultText = map[Result]string{
	Success:            "no error",
	UnhandledCudaError: "a CUDA call inside NCCL failed",
	SystemError:        "a system call inside NCCL failed (memory, sockets, shared memory)",
	InternalError:      "NCCL internal error",
	InvalidArgument:    "an argument is invalid",
	InvalidUsage:       "the call is not allowed here (order of calls, group use, communicator state)",
	RemoteError:        "a remote peer failed or disconnected",
	InProgress:         "the operation is still in progress (non-blocking communicator)",
}

// lengthMismatch reports slices that must describe the same number of items
// but do not; the wrapper returns it before calling NCCL.
func lengthMismatch(fn, a string, la int, b string, lb int) error {
	return fmt.Errorf("ncclapi: %s: len(%s) = %d but len(%s) = %d: %w; Fix: pass slices of equal length",
		fn, a, la, b, lb, InvalidArgument)
}
