//go:build cgo

package cudaapi

/*
#cgo linux LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

// dlerror's message lives in thread-local storage, and a goroutine may run
// its next cgo call on another thread, so each call copies the message out
// before returning.
static void vyre_dlerror(char *buf, size_t n) {
	const char *e = dlerror();
	snprintf(buf, n, "%s", e ? e : "");
}

static void *vyre_dlopen(const char *path, char *buf, size_t n) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		vyre_dlerror(buf, n);
	}
	return h;
}

// vyre_driver_version calls cuDriverGetVersion through its address, for
// error messages: 0 when it fails.
static int vyre_driver_version(uintptr_t fn) {
	int v = 0;
	if (((int (*)(int *))fn)(&v) != 0) {
		return 0;
	}
	return v;
}

static void *vyre_dlsym(void *h, const char *name, char *buf, size_t n) {
	dlerror();
	void *s = dlsym(h, name);
	vyre_dlerror(buf, n);
	return s;
}
*/
import "C"

import (
	"fmt"
	"os"
	"unsafe"
)

// dlLibrary is a library opened with dlopen.
type dlLibrary struct {
	path   string
	handle unsafe.Pointer
}

// openDefault opens $VYRECUDA_LIBCUDA, or libcuda.so.1.
func openDefault() (library, error) {
	path := os.Getenv(libraryEnv)
	if path == "" {
		path = defaultLibrary
	}
	return dlopen(path)
}

// dlopen opens a shared library; failure wraps ErrDriverNotFound.
func dlopen(path string) (*dlLibrary, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var msg [512]C.char
	h := C.vyre_dlopen(cpath, &msg[0], C.size_t(len(msg)))
	if h == nil {
		return nil, fmt.Errorf("%w: dlopen %s: %s; Fix: install the NVIDIA driver or set %s to libcuda's path",
			ErrDriverNotFound, path, C.GoString(&msg[0]), libraryEnv)
	}
	return &dlLibrary{path: path, handle: h}, nil
}

func (l *dlLibrary) lookup(name string) (uintptr, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var msg [512]C.char
	sym := C.vyre_dlsym(l.handle, cname, &msg[0], C.size_t(len(msg)))
	if msg[0] != 0 {
		return 0, fmt.Errorf("dlsym %s in %s: %s", name, l.path, C.GoString(&msg[0]))
	}
	if sym == nil {
		return 0, fmt.Errorf("dlsym %s in %s: null address", name, l.path)
	}
	return uintptr(sym), nil
}

// driverVersion reports cuDriverGetVersion's answer, or 0 when the library
// lacks it or it fails.
func (l *dlLibrary) driverVersion() int {
	a, err := l.lookup("cuDriverGetVersion")
	if err != nil {
		return 0
	}
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
