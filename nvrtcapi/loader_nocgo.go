//go:build !cgo

package nvrtcapi

import "unsafe"

func cStrings([]string) (unsafe.Pointer, func()) { return nil, func() {} }

func cBuffer(uint64) (unsafe.Pointer, func()) { return nil, func() {} }

func cInts(int) (unsafe.Pointer, func()) { return nil, func() {} }

func goInts(unsafe.Pointer, int) []int { return nil }
