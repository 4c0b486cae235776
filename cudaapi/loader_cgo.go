//go:build cgo

package cudaapi

/*
#cgo linux LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
*/
import "C"

import (
	"fmt"
	"os"
	"sync"
	"unsafe"
)

// dlerrorMu serialises dlopen/dlsym with dlerror, whose message is per thread
// but whose call sequence must not interleave on one thread.
var dlerrorMu sync.Mutex

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
	dlerrorMu.Lock()
	defer dlerrorMu.Unlock()
	h := C.dlopen(cpath, C.RTLD_NOW|C.RTLD_LOCAL)
	if h == nil {
		return nil, fmt.Errorf("%w: dlopen %s: %s; Fix: install the NVIDIA driver or set %s to libcuda's path",
			ErrDriverNotFound, path, C.GoString(C.dlerror()), libraryEnv)
	}
	return &dlLibrary{path: path, handle: h}, nil
}

func (l *dlLibrary) lookup(name string) (uintptr, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	dlerrorMu.Lock()
	defer dlerrorMu.Unlock()
	C.dlerror() // clear a stale message
	sym := C.dlsym(l.handle, cname)
	if msg := C.dlerror(); msg != nil {
		return 0, fmt.Errorf("dlsym %s in %s: %s", name, l.path, C.GoString(msg))
	}
	if sym == nil {
		return 0, fmt.Errorf("dlsym %s in %s: null address", name, l.path)
	}
	return uintptr(sym), nil
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
