//go:build !cgo

package cudaapi

import "fmt"

// LaunchHostFunc queues f on stream s (cuLaunchHostFunc). Built without cgo,
// it returns ErrDriverNotFound (or an invalid-value error for a nil f).
func LaunchHostFunc(s Stream, f func()) error {
	if f == nil {
		return fmt.Errorf("cudaapi: LaunchHostFunc: nil function: %w; Fix: pass the function to run", CUDA_ERROR_INVALID_VALUE)
	}
	return launchHostFunc(s, nil, nil)
}
