//go:build cgo

package cudaapi

// This file holds only the exported callback: cgo forbids C definitions in
// the preamble of a file that uses //export.

// #include <stdint.h>
import "C"

import "runtime/cgo"

// vyreHostFuncCall runs the Go function behind a LaunchHostFunc handle on the
// driver's callback thread and releases the handle.
//
//export vyreHostFuncCall
func vyreHostFuncCall(h C.uintptr_t) {
	handle := cgo.Handle(h)
	f := handle.Value().(func())
	handle.Delete()
	f()
}
