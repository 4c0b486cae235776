package cuda

import (
	"unsafe"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// MemcpyHtoDAsync queues a copy of src (page-locked) to dst on s.
func (d *Driver) MemcpyHtoDAsync(dst uint64, src []byte, s driver.Stream) error {
	const call = "cuMemcpyHtoDAsync"
	if err := deviceArgs(call, dst, uint64(len(src)), s); err != nil {
		return err
	}
	return d.bound(func() error {
		// hostMu is held shared across the enqueue so a concurrent HostFree of
		// the same block cannot slip between the check and the copy.
		unlock, err := d.lockPinned(call, "source", src)
		if err != nil {
			return err
		}
		defer unlock()
		return callError(call, cudaapi.MemcpyHtoDAsync(cudaapi.DevicePtr(dst), unsafe.Pointer(unsafe.SliceData(src)), uint64(len(src)), cudaapi.Stream(s)))
	})
}

// MemcpyDtoHAsync queues a copy of len(dst) bytes from src into dst
// (page-locked) on s.
func (d *Driver) MemcpyDtoHAsync(dst []byte, src uint64, s driver.Stream) error {
	const call = "cuMemcpyDtoHAsync"
	if err := deviceArgs(call, src, uint64(len(dst)), s); err != nil {
		return err
	}
	return d.bound(func() error {
		unlock, err := d.lockPinned(call, "destination", dst)
		if err != nil {
			return err
		}
		defer unlock()
		return callError(call, cudaapi.MemcpyDtoHAsync(unsafe.Pointer(unsafe.SliceData(dst)), cudaapi.DevicePtr(src), uint64(len(dst)), cudaapi.Stream(s)))
	})
}

// deviceArgs refuses the legacy null stream, a null device pointer and an
// empty operation before anything reaches the driver.
func deviceArgs(call string, dev, n uint64, s driver.Stream) error {
	switch {
	case s == 0:
		return nullStream(call)
	case dev == 0:
		return refused(call, "null device pointer", "pass a pointer from MemAlloc")
	case n == 0:
		return refused(call, "0 bytes", "skip empty copies")
	}
	return nil
}

// MemcpyDtoDAsync queues a device-to-device copy of n bytes on s.
func (d *Driver) MemcpyDtoDAsync(dst, src uint64, n uint64, s driver.Stream) error {
	const call = "cuMemcpyDtoDAsync"
	if src == 0 {
		return refused(call, "null source pointer", "pass a pointer from MemAlloc")
	}
	if err := deviceArgs(call, dst, n, s); err != nil {
		return err
	}
	return d.do(call, func() error {
		return cudaapi.MemcpyDtoDAsync(cudaapi.DevicePtr(dst), cudaapi.DevicePtr(src), n, cudaapi.Stream(s))
	})
}

// MemsetD8Async queues setting n bytes at dst to v on s.
func (d *Driver) MemsetD8Async(dst uint64, v byte, n uint64, s driver.Stream) error {
	const call = "cuMemsetD8Async"
	if err := deviceArgs(call, dst, n, s); err != nil {
		return err
	}
	return d.do(call, func() error { return cudaapi.MemsetD8Async(cudaapi.DevicePtr(dst), v, n, cudaapi.Stream(s)) })
}

// MemcpyHtoDInline queues a copy of src, ordinary host memory, to device
// address dst on s. CUDA copies a pageable source into its own staging
// before cuMemcpyHtoDAsync returns, so src is not read afterwards.
func (d *Driver) MemcpyHtoDInline(dst uint64, src []byte, s driver.Stream) error {
	const call = "cuMemcpyHtoDAsync"
	if err := deviceArgs(call, dst, uint64(len(src)), s); err != nil {
		return err
	}
	return d.bound(func() error {
		return callError(call, cudaapi.MemcpyHtoDAsync(cudaapi.DevicePtr(dst), unsafe.Pointer(unsafe.SliceData(src)), uint64(len(src)), cudaapi.Stream(s)))
	})
}
