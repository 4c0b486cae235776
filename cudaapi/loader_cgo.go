//go:build cgo

package cudaapi

/*
#include <stdint.h>
#include <stdlib.h>

// vyre_driver_version calls cuDriverGetVersion through its address, for
// error messages: 0 when it fails.
static int vyre_driver_version(uintptr_t fn) {
	int v = 0;
	if (((int (*)(int *))fn)(&v) != 0) {
		return 0;
	}
	return v;
}
*/
import "C"

import "unsafe"

// callDriverGetVersion calls cuDriverGetVersion at address a: 0 when it
// fails.
func callDriverGetVersion(a uintptr) int {
	return int(C.vyre_driver_version(C.uintptr_t(a)))
}

// cMalloc returns n bytes of C memory, or nil when n is 0 or malloc fails.
func cMalloc(n int) unsafe.Pointer {
	if n <= 0 {
		return nil
	}
	return C.malloc(C.size_t(n))
}

// cFree releases memory from cMalloc.
func cFree(p unsafe.Pointer) { C.free(p) }
