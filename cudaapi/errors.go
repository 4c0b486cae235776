package cudaapi

import (
	"errors"
	"fmt"
	"strconv"
)

// ErrDriverNotFound is returned by every call when libcuda cannot be loaded
// (no NVIDIA driver, a bad $VYRECUDA_LIBCUDA, or a build without cgo).
var ErrDriverNotFound = errors.New("cudaapi: CUDA driver library not found")

// notReady is CUDA_ERROR_NOT_READY as an error, boxed once: polling loops
// get it from cuEventQuery and cuStreamQuery over and over, and turning a
// Result of 256 or more into an error allocates.
var notReady error = CUDA_ERROR_NOT_READY

// statusError returns a failed status as the error a wrapper returns,
// without allocating for CUDA_ERROR_NOT_READY.
func statusError(r Result) error {
	if r == CUDA_ERROR_NOT_READY {
		return notReady
	}
	return r
}

// ErrMissingSymbol matches, through errors.Is, every *MissingSymbolError.
var ErrMissingSymbol = errors.New("cudaapi: driver entry point missing")

// MissingSymbolError reports a driver entry point that cannot be called: the
// loaded libcuda does not export it (an older driver), or the cuda.h the
// bindings were generated from did not declare it. Only calls of that entry
// point fail; everything else keeps working.
type MissingSymbolError struct {
	Library   string   // the library searched, e.g. libcuda
	Symbol    string   // the symbol looked up, e.g. cuMemcpyBatchAsync_v2
	Fallbacks []string // older symbols of the same C signature, also tried
	// Since is the CUDA version (1000*major + 10*minor) that introduced the
	// oldest symbol the call can use.
	Since int
	// Driver is the loaded library's CUDA version (for libcuda,
	// cuDriverGetVersion), 0 when it could not be read.
	Driver int
	// Header is the version of a header that lacked the entry point when the
	// bindings were generated (cuda.h's CUDA_VERSION), 0 when the header
	// declared it.
	Header int
	Err    error // the loader's reason, when it gave one
}

// Error names the symbol, the version that introduced it, the loaded driver's
// version, and what to do.
func (e *MissingSymbolError) Error() string {
	lib := e.Library
	if lib == "" {
		lib = "libcuda"
	}
	if e.Header != 0 {
		return fmt.Sprintf("cudaapi: %s (%s) is not in these bindings: they were generated from a header of %s, which does not declare it; Fix: regenerate the bindings from the header of %s or newer (make generate)",
			e.Symbol, formatCUDA(e.Since), formatCUDA(e.Header), formatCUDA(e.Since))
	}
	loaded, install := "driver for "+formatCUDA(e.Driver), "an NVIDIA driver"
	if lib != "libcuda" {
		loaded, install = formatCUDA(e.Driver), "the "+lib
	}
	msg := "cudaapi: the loaded " + lib + " (" + loaded + ") has no " + e.Symbol
	for _, f := range e.Fallbacks {
		msg += " nor " + f
	}
	msg += ", which appeared in " + formatCUDA(e.Since)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg + "; Fix: install " + install + " for " + formatCUDA(e.Since) + " or newer, or avoid this call there"
}

// formatCUDA spells a CUDA version number: 12040 is "CUDA 12.4", 0 "an unknown CUDA version".
func formatCUDA(v int) string {
	if v <= 0 {
		return "an unknown CUDA version"
	}
	return "CUDA " + strconv.Itoa(v/1000) + "." + strconv.Itoa(v%1000/10)
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
	if !driver.Loaded() {
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
