//go:build !cgo

package nvrtcapi

import "unsafe"

// dlopen cannot load anything without cgo.
func dlopen(string) (library, error) { return nil, &LibraryNotFoundError{NoCgo: true} }

// haveCgo says whether dlopen can load anything.
const haveCgo = false

func cStrings([]string) (unsafe.Pointer, func()) { return nil, func() {} }

func cBuffer(uint64) (unsafe.Pointer, func()) { return nil, func() {} }

func cInts(int) (unsafe.Pointer, func()) { return nil, func() {} }

func goInts(unsafe.Pointer, int) []int { return nil }
