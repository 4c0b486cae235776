package cuda

import (
	"unsafe"

	"github.com/vyre-go/vyrecuda/cudaapi"
)

// MemcpyHtoD copies src (any host memory) to dst and returns when the copy
// is done: the driver stages pageable memory itself.
func (d *Driver) MemcpyHtoD(dst uint64, src []byte) error {
	const call = "cuMemcpyHtoD"
	if err := syncArgs(call, dst, len(src)); err != nil {
		return err
	}
	return d.do(call, func() error {
		return cudaapi.MemcpyHtoD(cudaapi.DevicePtr(dst), unsafe.Pointer(unsafe.SliceData(src)), uint64(len(src)))
	})
}

// MemcpyDtoH copies len(dst) bytes from src into dst (any host memory) and
// returns when the copy is done.
func (d *Driver) MemcpyDtoH(dst []byte, src uint64) error {
	const call = "cuMemcpyDtoH"
	if err := syncArgs(call, src, len(dst)); err != nil {
		return err
	}
	return d.do(call, func() error {
		return cudaapi.MemcpyDtoH(unsafe.Pointer(unsafe.SliceData(dst)), cudaapi.DevicePtr(src), uint64(len(dst)))
	})
}

// syncArgs refuses a null device pointer and an empty copy before anything
// reaches the driver.
func syncArgs(call string, dev uint64, n int) error {
	switch {
	case dev == 0:
		return refused(call, "null device pointer", "pass a pointer from MemAlloc")
	case n == 0:
		return refused(call, "0 bytes", "skip empty copies")
	}
	return nil
}
