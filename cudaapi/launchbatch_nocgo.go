//go:build !cgo

package cudaapi

import "unsafe"

// launchBatch cannot reach the driver without cgo.
func launchBatch(unsafe.Pointer, unsafe.Pointer, int, bool) (int, error) {
	return 0, ErrDriverNotFound
}
