//go:build !cgo

package cudaapi

import "unsafe"

// openDefault cannot load anything without cgo.
func openDefault() (library, error) { return nil, ErrDriverNotFound }

// cMalloc has no C heap without cgo.
func cMalloc(int) unsafe.Pointer { return nil }

// cFree is a no-op without cgo.
func cFree(unsafe.Pointer) {}
