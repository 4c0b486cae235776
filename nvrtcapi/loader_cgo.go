//go:build cgo

package nvrtcapi

/*
#cgo linux LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

// Copies dlerror's thread-local message out before the goroutine can move.
static void *vyre_nvrtc_dl(const char *path, const char *sym, void *h, char *buf, size_t n) {
	void *r;
	dlerror();
	if (sym == NULL) {
		r = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	} else {
		r = dlsym(h, sym);
	}
	const char *e = dlerror();
	snprintf(buf, n, "%s", e ? e : "");
	return r;
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// haveCgo says whether dlopen can load anything.
const haveCgo = true

// dlLibrary is a library opened with dlopen.
type dlLibrary struct {
	path   string
	handle unsafe.Pointer
}

// dlopen opens one shared library; the error names the path and the reason.
func dlopen(path string) (library, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var msg [512]C.char
	h := C.vyre_nvrtc_dl(cpath, nil, nil, &msg[0], C.size_t(len(msg)))
	if h == nil {
		return nil, fmt.Errorf("%s: %s", path, C.GoString(&msg[0]))
	}
	return &dlLibrary{path: path, handle: h}, nil
}

func (l *dlLibrary) lookup(name string) (uintptr, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var msg [512]C.char
	sym := C.vyre_nvrtc_dl(nil, cname, l.handle, &msg[0], C.size_t(len(msg)))
	if msg[0] != 0 || sym == nil {
		return 0, fmt.Errorf("dlsym %s in %s: %s", name, l.path, C.GoString(&msg[0]))
	}
	return uintptr(sym), nil
}

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
