//go:build !cgo

package ncclapi

import "fmt"

// openDefault cannot load anything without cgo.
func openDefault() (opened, error) {
	return nil, fmt.Errorf("%w: this binary was built without cgo (CGO_ENABLED=0); Fix: rebuild with CGO_ENABLED=1 and gcc to load libnccl (%s selects its path)",
		ErrLibraryNotFound, libraryEnv)
}
