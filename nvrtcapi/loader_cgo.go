//go:build cgo

package nvrtcapi

/*
#include <stdlib.h>
*/
import "C"

import "unsafe"

// cStrings copies ss into C memory as a char* array; free releases it all.
// An empty ss gives a nil array.
func cStrings(ss []string) (arr unsafe.Pointer, free func()) {
	if len(ss) == 0 {
		return nil, func() {}
	}
	arr = C.calloc(C.size_t(len(ss)), C.size_t(unsafe.Sizeof(uintptr(0))))
	ptrs := unsafe.Slice((**C.char)(arr), len(ss))
	for i, s := range ss {
		ptrs[i] = C.CString(s)
	}
	return arr, func() {
		for _, p := range ptrs {
			C.free(unsafe.Pointer(p))
		}
		C.free(arr)
	}
}

// cBuffer returns n bytes of C memory (at least one) and its release.
func cBuffer(n uint64) (unsafe.Pointer, func()) {
	p := C.calloc(C.size_t(max(n, 1)), 1)
	return p, func() { C.free(p) }
}

// cInts returns room for n C ints and its release.
func cInts(n int) (unsafe.Pointer, func()) {
	return cBuffer(uint64(max(n, 1)) * uint64(unsafe.Sizeof(C.int(0))))
}

// goInts reads n C ints.
func goInts(p unsafe.Pointer, n int) []int {
	out := make([]int, n)
	for i, v := range unsafe.Slice((*C.int)(p), n) {
		out[i] = int(v)
	}
	return out
}
