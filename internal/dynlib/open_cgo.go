//go:build cgo

package dynlib

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
	"unsafe"
)

// HaveCgo reports whether Open can load anything: false in binaries built
// with CGO_ENABLED=0.
const HaveCgo = true

// DL is a library opened with dlopen.
type DL struct {
	path   string
	handle unsafe.Pointer
}

// Open loads a shared library with dlopen (RTLD_NOW | RTLD_LOCAL); failure
// is an *OpenError carrying dlerror's text.
func Open(path string) (*DL, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var msg [512]C.char
	h := C.vyre_dlopen(cpath, &msg[0], C.size_t(len(msg)))
	if h == nil {
		return nil, &OpenError{Path: path, Reason: C.GoString(&msg[0])}
	}
	return &DL{path: path, handle: h}, nil
}

// Lookup returns the address of a symbol with dlsym; an absent symbol or a
// null address is an error naming the symbol and the library.
func (l *DL) Lookup(name string) (uintptr, error) {
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
