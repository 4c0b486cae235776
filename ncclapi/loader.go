package ncclapi

import (
	"fmt"

	"github.com/vyre-go/vyrecuda/internal/dynlib"
)

// libraryEnv names the environment variable that overrides libnccl's path.
const libraryEnv = "VYRECUDA_LIBNCCL"

// defaultLibrary is libnccl's soname.
const defaultLibrary = "libnccl.so.2"

// opened is an opened libnccl. Tests substitute fakes for it.
type opened = dynlib.Library

// library is the process-wide loader every generated wrapper goes through.
var library = dynlib.New(openDefault, ErrLibraryNotFound, missingSymbol)

// missingSymbol describes an NCCL entry point the loaded libnccl lacks, or
// the header lacked (then with no lookup error).
func missingSymbol(_ opened, m dynlib.Miss) error {
	return &MissingSymbolError{Symbol: m.Names[0], Err: m.Err}
}

// openDefault opens $VYRECUDA_LIBNCCL, or libnccl.so.2.
func openDefault() (opened, error) {
	if !dynlib.HaveCgo {
		return nil, fmt.Errorf("%w: this binary was built without cgo (CGO_ENABLED=0); Fix: rebuild with CGO_ENABLED=1 and gcc to load libnccl (%s selects its path)",
			ErrLibraryNotFound, libraryEnv)
	}
	lib, err := dynlib.Open(dynlib.EnvOr(libraryEnv, defaultLibrary))
	if err != nil {
		return nil, fmt.Errorf("%w: %v; Fix: install NCCL 2 (libnccl.so.2: the libnccl2 package or the nvidia-nccl Python wheel) or set %s to its path",
			ErrLibraryNotFound, err, libraryEnv)
	}
	return lib, nil
}

// Loaded opens libnccl if that has not been tried yet and reports the
// outcome: nil when it is loaded, an error matching ErrLibraryNotFound
// otherwise.
func Loaded() error {
	_, err := library.Open()
	return err
}
