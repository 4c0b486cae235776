//go:build !cgo

package cudaapi

import "unsafe"

// callDriverGetVersion cannot call anything without cgo.
func callDriverGetVersion(uintptr) int { return 0 }

// cMalloc has no C heap without cgo.
func cMalloc(int) unsafe.Pointer { return nil }

// cFree is a no-op without cgo.
func cFree(unsafe.Pointer) {}
