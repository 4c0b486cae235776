//go:build cgo

package cudaapi

/*
#include <stdint.h>
#include <stdlib.h>

extern void vyreHostFuncCall(uintptr_t h);

// vyre_host_fn is the CUhostFn the driver calls: data is a malloc'd cell
// holding a cgo.Handle, freed here before the Go function runs.
static void vyre_host_fn(void *data) {
	uintptr_t h = *(uintptr_t *)data;
	free(data);
	vyreHostFuncCall(h);
}

static void *vyre_host_fn_addr(void) { return (void *)vyre_host_fn; }
*/
import "C"

import (
	"fmt"
	"runtime/cgo"
	"unsafe"
)

// LaunchHostFunc queues f on stream s (cuLaunchHostFunc): the driver runs it
// on one of its own threads once the work queued on s before it has
// completed, and work queued after it waits for f to return. f runs exactly
// once if the launch succeeds and never if it fails. f must not call the CUDA
// API (the driver forbids it in host functions) and should return quickly: it
// holds up the stream; a panic in f ends the program, as in any goroutine.
// It needs a driver for CUDA 10.0 or newer.
//
// No Go pointer crosses into C: the driver receives a C trampoline and a
// C-allocated cell holding a cgo.Handle to f, both released when f runs.
func LaunchHostFunc(s Stream, f func()) error {
	if f == nil {
		return fmt.Errorf("cudaapi: LaunchHostFunc: nil function: %w; Fix: pass the function to run", CUDA_ERROR_INVALID_VALUE)
	}
	if _, err := procLaunchHostFunc.Find(); err != nil {
		return err
	}
	cell := cMalloc(int(unsafe.Sizeof(uintptr(0))))
	if cell == nil {
		return fmt.Errorf("cudaapi: LaunchHostFunc: no C memory for the callback cell: %w; Fix: free host memory", CUDA_ERROR_OUT_OF_MEMORY)
	}
	h := cgo.NewHandle(f)
	*(*uintptr)(cell) = uintptr(h)
	if err := launchHostFunc(s, C.vyre_host_fn_addr(), cell); err != nil {
		h.Delete()
		cFree(cell)
		return err
	}
	return nil
}
