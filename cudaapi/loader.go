package cudaapi

import (
	"fmt"

	"github.com/vyre-go/vyrecuda/internal/dynlib"
)

// libraryEnv names the environment variable that overrides the driver
// library's path.
const libraryEnv = "VYRECUDA_LIBCUDA"

// defaultLibrary is the driver library's soname.
const defaultLibrary = "libcuda.so.1"

// library is an opened driver library. Tests substitute fakes for it.
type library = dynlib.Library

// proc is one lazily resolved driver symbol, with an optional older fallback
// of the same C signature.
type proc = dynlib.Proc

// versioner is implemented by libraries that can report the driver's CUDA
// version (cuDriverGetVersion) without going through a proc.
type versioner interface {
	driverVersion() int
}

// driver is the process-wide loader every driver wrapper goes through.
var driver = dynlib.New(openDefault, ErrDriverNotFound, missingSymbol)

// missingSymbol describes a driver entry point the loaded libcuda lacks, or
// the header lacked, with the driver's version when the library can say.
func missingSymbol(lib library, m dynlib.Miss) error {
	miss := &MissingSymbolError{Library: "libcuda", Symbol: m.Names[0], Fallbacks: m.Names[1:], Since: m.Since, Err: m.Err}
	if m.Undeclared {
		miss.Header = HeaderVersion
	}
	if v, ok := lib.(versioner); ok {
		miss.Driver = v.driverVersion()
	}
	return miss
}

// driverLibrary is libcuda opened with dlopen.
type driverLibrary struct{ *dynlib.DL }

// driverVersion reports cuDriverGetVersion's answer, or 0 when the library
// lacks it or it fails.
func (l driverLibrary) driverVersion() int {
	a, err := l.Lookup("cuDriverGetVersion")
	if err != nil {
		return 0
	}
	return callDriverGetVersion(a)
}

// openDefault opens $VYRECUDA_LIBCUDA, or libcuda.so.1.
func openDefault() (library, error) {
	if !dynlib.HaveCgo {
		return nil, fmt.Errorf("%w: this binary was built without cgo (CGO_ENABLED=0); Fix: rebuild with CGO_ENABLED=1 and gcc to load libcuda (%s selects another library path)",
			ErrDriverNotFound, libraryEnv)
	}
	lib, err := dlopen(dynlib.EnvOr(libraryEnv, defaultLibrary))
	if err != nil {
		return nil, err
	}
	return lib, nil
}

// dlopen opens a shared library; failure wraps ErrDriverNotFound.
func dlopen(path string) (driverLibrary, error) {
	lib, err := dynlib.Open(path)
	if err != nil {
		return driverLibrary{}, fmt.Errorf("%w: %v; Fix: install the NVIDIA driver or set %s to libcuda's path",
			ErrDriverNotFound, err, libraryEnv)
	}
	return driverLibrary{lib}, nil
}

// Loaded opens the driver library if that has not been tried yet and reports
// the outcome: nil when libcuda is loaded, an error matching ErrDriverNotFound
// otherwise. It does not call cuInit.
func Loaded() error {
	_, err := driver.Open()
	return err
}
