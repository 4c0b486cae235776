//go:build cgo

package ncclapi

/*
#cgo linux LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

// dlerror's message is thread-local and a goroutine may move between
// threads, so each call copies it out before returning.
static void vyre_nccl_dlerror(char *buf, size_t n) {
	const char *e = dlerror();
	snprintf(buf, n, "%s", e ? e : "");
}

static void *vyre_nccl_dlopen(const char *path, char *buf, size_t n) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		vyre_nccl_dlerror(buf, n);
	}
	return h;
}

static void *vyre_nccl_dlsym(void *h, const char *name, char *buf, size_t n) {
	dlerror();
	void *s = dlsym(h, name);
	vyre_nccl_dlerror(buf, n);
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

// openDefault opens $VYRECUDA_LIBNCCL, or libnccl.so.2.
func openDefault() (opened, error) {
	path := os.Getenv(libraryEnv)
	if path == "" {
		path = defaultLibrary
	}
	return dlopen(path)
}

// dlopen opens a shared library; failure wraps ErrLibraryNotFound.
func dlopen(path string) (*dlLibrary, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var msg [512]C.char
	h := C.vyre_nccl_dlopen(cpath, &msg[0], C.size_t(len(msg)))
	if h == nil {
		return nil, fmt.Errorf("%w: dlopen %s: %s; Fix: install NCCL 2 (libnccl.so.2: the libnccl2 package or the nvidia-nccl Python wheel) or set %s to its path",
			ErrLibraryNotFound, path, C.GoString(&msg[0]), libraryEnv)
	}
	return &dlLibrary{path: path, handle: h}, nil
}

func (l *dlLibrary) lookup(name string) (uintptr, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var msg [512]C.char
	sym := C.vyre_nccl_dlsym(l.handle, cname, &msg[0], C.size_t(len(msg)))
	if msg[0] != 0 {
		return 0, fmt.Errorf("dlsym %s in %s: %s", name, l.path, C.GoString(&msg[0]))
	}
	if sym == nil {
		return 0, fmt.Errorf("dlsym %s in %s: null address", name, l.path)
	}
	return uintptr(sym), nil
}
