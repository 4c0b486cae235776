package nvrtcapi

import (
	"errors"
	"fmt"
	"strings"
)

// ErrLibraryNotFound matches, through errors.Is, the error every call returns
// when libnvrtc cannot be loaded (no CUDA toolkit, a bad $VYRECUDA_LIBNVRTC,
// or a build without cgo).
var ErrLibraryNotFound = errors.New("nvrtcapi: NVRTC library not found")

// LibraryNotFoundError says which libraries the loader tried and why each
// failed. errors.Is(err, ErrLibraryNotFound) holds for it.
type LibraryNotFoundError struct {
	Tried   []string // each path tried, with the loader's reason
	NoCgo   bool     // the binary was built without cgo
	EnvName string   // the variable that selects a library path
}

// Error lists what was tried and says what to do, in one line.
func (e *LibraryNotFoundError) Error() string {
	if e.NoCgo {
		return "nvrtcapi: NVRTC library not found: this binary was built without cgo (CGO_ENABLED=0); Fix: rebuild with CGO_ENABLED=1 and a C compiler to load libnvrtc"
	}
	return fmt.Sprintf("nvrtcapi: NVRTC library not found (tried %s); Fix: install the CUDA toolkit's NVRTC (libnvrtc.so.13, .12 or .11.2) or set %s to its path",
		strings.Join(e.Tried, "; "), e.EnvName)
}

// Is makes errors.Is(err, ErrLibraryNotFound) true.
func (e *LibraryNotFoundError) Is(target error) bool { return target == ErrLibraryNotFound }

// ErrMissingSymbol matches, through errors.Is, every *MissingSymbolError.
var ErrMissingSymbol = errors.New("nvrtcapi: NVRTC entry point missing")

// MissingSymbolError reports an NVRTC entry point the loaded libnvrtc does not
// export, usually because it is older than the header the bindings come from
// (nvrtcGetCUBIN first shipped in CUDA 11.1). Only calls of that entry point
// fail.
type MissingSymbolError struct {
	Symbol string // the symbol looked up
	// Since is the CUDA toolkit version (1000*major + 10*minor) whose NVRTC
	// introduced it.
	Since int
	// Undeclared is set when the nvrtc.h the bindings were generated from
	// did not declare it, so no library is asked.
	Undeclared bool
	Err        error // the loader's reason, when it gave one
}

// Error names the symbol, the version that has it, and says what to do.
func (e *MissingSymbolError) Error() string {
	ver := fmt.Sprintf("CUDA %d.%d", e.Since/1000, e.Since%1000/10)
	if e.Undeclared {
		return fmt.Sprintf("nvrtcapi: %s (%s) is not in these bindings: the nvrtc.h they were generated from does not declare it; Fix: regenerate them from the nvrtc.h of %s or newer (make generate NVRTC_H=...)",
			e.Symbol, ver, ver)
	}
	msg := "nvrtcapi: the loaded libnvrtc has no " + e.Symbol + ", which appeared in " + ver
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg + "; Fix: install the NVRTC of " + ver + " or newer, or avoid this call with this one"
}

// Is makes errors.Is(err, ErrMissingSymbol) true.
func (e *MissingSymbolError) Is(target error) bool { return target == ErrMissingSymbol }

// Unwrap returns the loader's reason.
func (e *MissingSymbolError) Unwrap() error { return e.Err }

// Error returns the enumerator's name and number, e.g.
// "nvrtc: NVRTC_ERROR_COMPILATION (6)".
func (r Result) Error() string {
	if name, ok := resultName(r); ok {
		return fmt.Sprintf("nvrtc: %s (%d)", name, int32(r))
	}
	return fmt.Sprintf("nvrtc: unknown nvrtcResult %d", int32(r))
}
