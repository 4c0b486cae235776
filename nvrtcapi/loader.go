package nvrtcapi

import (
	"errors"
	"os"
	"path/filepath"

	"github.com/vyre-go/vyrecuda/internal/dynlib"
)

// LibraryEnv names the environment variable that selects libnvrtc's path.
const LibraryEnv = "VYRECUDA_LIBNVRTC"

// sonames are the NVRTC libraries tried, newest first.
var sonames = []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2"}

// library is an opened NVRTC library. Tests substitute fakes for it.
type library = dynlib.Library

// nvrtc is the process-wide loader every wrapper goes through.
var nvrtc = dynlib.New(openDefault, &LibraryNotFoundError{EnvName: LibraryEnv}, missingSymbol)

// missingSymbol describes an NVRTC entry point the loaded libnvrtc lacks, or
// the header lacked. NVRTC has no versioned symbols: there is one name.
func missingSymbol(_ library, m dynlib.Miss) error {
	return &MissingSymbolError{Symbol: m.Names[0], Since: m.Since, Undeclared: m.Undeclared, Err: m.Err}
}

// candidates lists the paths openDefault tries, in order.
func candidates(getenv func(string) string) []string {
	var out []string
	if p := getenv(LibraryEnv); p != "" {
		out = append(out, p)
	}
	out = append(out, sonames...)
	dirs := []string{"/usr/local/cuda/lib64"}
	if home := getenv("CUDA_HOME"); home != "" {
		dirs = append([]string{filepath.Join(home, "lib64")}, dirs...)
	}
	for _, d := range dirs {
		for _, s := range sonames {
			out = append(out, filepath.Join(d, s))
		}
	}
	return out
}

// openFirst opens the first candidate that loads; the error lists them all.
func openFirst(paths []string, open func(string) (library, error)) (library, error) {
	lib, errs := dynlib.OpenFirst(paths, open)
	if lib != nil {
		return lib, nil
	}
	nf := &LibraryNotFoundError{EnvName: LibraryEnv}
	for _, err := range errs {
		nf.Tried = append(nf.Tried, err.Error())
	}
	return nil, nf
}

// dlopen opens one shared library; the error names the path and the reason.
func dlopen(path string) (library, error) {
	lib, err := dynlib.Open(path)
	if oe, ok := err.(*dynlib.OpenError); ok {
		return nil, errors.New(oe.Path + ": " + oe.Reason)
	}
	if err != nil {
		return nil, err
	}
	return lib, nil
}

// openDefault opens the first NVRTC library that loads.
func openDefault() (library, error) {
	if !dynlib.HaveCgo {
		return nil, &LibraryNotFoundError{NoCgo: true, EnvName: LibraryEnv}
	}
	return openFirst(candidates(os.Getenv), dlopen)
}

// Loaded opens libnvrtc if that has not been tried yet and reports the
// outcome: nil when it is loaded, an error matching ErrLibraryNotFound
// otherwise.
func Loaded() error {
	_, err := nvrtc.Open()
	return err
}
