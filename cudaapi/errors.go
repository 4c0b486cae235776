package cudaapi

import (
	"errors"
	"fmt"
	"strconv"
)

// ErrDriverNotFound is returned by every call when libcuda cannot be loaded
// (no NVIDIA driver, a bad $VYRECUDA_LIBCUDA, or a build without cgo).
var ErrDriverNotFound = errors.New("cudaapi: CUDA driver library not found")

// ErrMissingSymbol matches, through errors.Is, every *MissingSymbolError.
var ErrMissingSymbol = errors.New("cudaapi: driver entry point missing")

// MissingSymbolError reports a driver entry point the loaded libcuda does not
// export, usually because the driver is older than the header the bindings
// were generated from. Only calls of that entry point fail.
type MissingSymbolError struct {
	Symbol string // the symbol looked up, e.g. cuMemcpyBatchAsync_v2
	Err    error  // the loader's reason, when it gave one
}

// Error names the symbol and says what to do.
func (e *MissingSymbolError) Error() string {
	msg := "cudaapi: libcuda has no symbol " + e.Symbol + " (bindings generated from CUDA_VERSION " +
		strconv.Itoa(HeaderVersion) + ")"
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg + "; Fix: install a newer NVIDIA driver, or avoid this call on this driver"
}

// Is makes errors.Is(err, ErrMissingSymbol) true.
func (e *MissingSymbolError) Is(target error) bool { return target == ErrMissingSymbol }

// Unwrap returns the loader's reason.
func (e *MissingSymbolError) Unwrap() error { return e.Err }

// Name returns the cuda.h enumerator name of r, such as CUDA_ERROR_OUT_OF_MEMORY,
// or CUresult(N) for a value the header does not know.
func (r Result) Name() string {
	if n, ok := resultName(r); ok {
		return n
	}
	return "CUresult(" + strconv.Itoa(int(r)) + ")"
}

// String returns r's enumerator name.
func (r Result) String() string { return r.Name() }

// Error returns r's enumerator name followed, once the driver is loaded, by
// the driver's own description from cuGetErrorString. It never loads the
// driver itself.
func (r Result) Error() string {
	name := r.Name()
	if !driver.loaded.Load() {
		return name
	}
	if s, err := GetErrorString(r); err == nil && s != "" {
		return name + ": " + s
	}
	return name
}

// lengthMismatch reports slices that must describe the same number of items
// but do not; the wrapper returns it before calling the driver.
func lengthMismatch(fn, a string, la int, b string, lb int) error {
	return fmt.Errorf("cudaapi: %s: len(%s) = %d but len(%s) = %d: %w; Fix: pass slices of equal length",
		fn, a, la, b, lb, CUDA_ERROR_INVALID_VALUE)
}
