//go:build !cgo

package cudaapi

import (
	"fmt"
	"unsafe"
)

// openDefault cannot load anything without cgo.
func openDefault() (library, error) {
	return nil, fmt.Errorf("%w: this binary was built without cgo (CGO_ENABLED=0); Fix: rebuild with CGO_ENABLED=1 and gcc to load libcuda (%s selects another library path)",
		ErrDriverNotFound, libraryEnv)
}

// cMalloc has no C heap without cgo.
func cMalloc(int) unsafe.Pointer { return nil }

// cFree is a no-op without cgo.
func cFree(unsafe.Pointer) {}
