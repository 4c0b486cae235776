package cuda

import (
	"fmt"
	"math"
	"sort"
	"unsafe"

	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// MemAlloc allocates n > 0 bytes of device memory.
func (d *Driver) MemAlloc(n uint64) (uint64, error) {
	if n == 0 {
		return 0, refused("cuMemAlloc", "requested 0 bytes", "request at least 1 byte")
	}
	// A null pointer comes back as an error and owns no memory to free.
	p, err := get(d, "cuMemAlloc", func() (cudaapi.DevicePtr, error) { return cudaapi.MemAlloc(n) })
	return uint64(p), err
}

// MemFree frees device memory from MemAlloc.
func (d *Driver) MemFree(ptr uint64) error {
	if ptr == 0 {
		return refused("cuMemFree", "null device pointer", "pass a pointer from MemAlloc")
	}
	return d.do("cuMemFree", func() error { return cudaapi.MemFree(cudaapi.DevicePtr(ptr)) })
}

// HostAlloc allocates n bytes of portable page-locked memory and returns a
// slice over it (C memory, never moved or collected by Go).
func (d *Driver) HostAlloc(n uint64) ([]byte, error) {
	const call = "cuMemHostAlloc"
	if n == 0 || n > math.MaxInt {
		return nil, refused(call, fmt.Sprintf("requested %d bytes", n), "request between 1 byte and math.MaxInt bytes")
	}
	var b []byte
	err := d.bound(func() error {
		p, err := checked(call, func() (unsafe.Pointer, error) {
			return cudaapi.MemHostAlloc(n, cudaapi.CU_MEMHOSTALLOC_PORTABLE)
		})
		if err != nil {
			return err
		}
		d.hostMu.Lock()
		ok := d.host.insert(hostRange{start: uintptr(p), end: uintptr(p) + uintptr(n), p: p})
		d.hostMu.Unlock()
		if !ok {
			if ferr := cudaapi.MemFreeHost(p); ferr != nil {
				d.log.Error("freeing an overlapping pinned allocation failed", "err", ferr)
			}
			return &errs.Error{Op: call, Kind: errs.KindDriver, Code: resultNull, Err: resultNull,
				Detail: fmt.Sprintf("returned %#x, inside page-locked memory already tracked", uintptr(p)),
				Fix:    "the driver misbehaved; report it with the driver version"}
		}
		b = unsafe.Slice((*byte)(p), int(n))
		return nil
	})
	return b, err
}

// HostFree frees memory from HostAlloc, given its first byte.
func (d *Driver) HostFree(p unsafe.Pointer) error {
	return d.bound(func() error {
		d.hostMu.Lock()
		defer d.hostMu.Unlock()
		i, ok := d.host.find(uintptr(p))
		if p == nil || !ok || d.host[i].registered {
			return refused("cuMemFreeHost", fmt.Sprintf("%p does not start memory from HostAlloc", p),
				"pass the first byte of a HostAlloc slice, once")
		}
		// Held under hostMu so no copy check can see the range after the free.
		if err := cudaapi.MemFreeHost(p); err != nil {
			return callError("cuMemFreeHost", err)
		}
		d.host.removeAt(i)
		return nil
	})
}

// HostRegister page-locks n bytes of caller memory starting at p.
func (d *Driver) HostRegister(p unsafe.Pointer, n uint64) error {
	start := uintptr(p)
	if p == nil || n == 0 || n > uint64(^uintptr(0)-start) {
		return refused("cuMemHostRegister", fmt.Sprintf("range %p, %d bytes", p, n), "pass a non-nil pointer and a length that stays inside the address space")
	}
	return d.bound(func() error {
		d.hostMu.Lock()
		defer d.hostMu.Unlock()
		r := hostRange{start: start, end: start + uintptr(n), p: p, registered: true}
		if d.host.overlaps(r) {
			return &errs.Error{Op: "cuMemHostRegister", Kind: errs.KindInvalidArgument, Code: cudaapi.CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
				Err: cudaapi.CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, Detail: fmt.Sprintf("[%p, +%d) overlaps page-locked memory", p, n),
				Fix: "register each range once"}
		}
		if err := cudaapi.MemHostRegister(p, n, cudaapi.CU_MEMHOSTREGISTER_PORTABLE); err != nil {
			return callError("cuMemHostRegister", err)
		}
		d.host.insert(r)
		return nil
	})
}

// HostUnregister undoes HostRegister for the range starting at p.
func (d *Driver) HostUnregister(p unsafe.Pointer) error {
	return d.bound(func() error {
		d.hostMu.Lock()
		defer d.hostMu.Unlock()
		i, ok := d.host.find(uintptr(p))
		if p == nil || !ok || !d.host[i].registered {
			return &errs.Error{Op: "cuMemHostUnregister", Kind: errs.KindInvalidArgument, Code: cudaapi.CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
				Err: cudaapi.CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, Detail: fmt.Sprintf("%p does not start a registered range", p),
				Fix: "pass the pointer given to HostRegister, once"}
		}
		if err := cudaapi.MemHostUnregister(p); err != nil {
			return callError("cuMemHostUnregister", err)
		}
		d.host.removeAt(i)
		return nil
	})
}

// checkPinned refuses host memory that this driver did not page-lock: an
// asynchronous copy reads or writes it after the call returns, which Go
// memory cannot promise. hostMu must be held (shared).
func (d *Driver) checkPinned(call, what string, b []byte) error {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if !d.host.contains(p, uintptr(len(b))) {
		return refused(call, fmt.Sprintf("%s [%#x, +%d) is not page-locked memory from HostAlloc or HostRegister", what, p, len(b)),
			"stage the bytes through pinned memory (the Backend does this for you)")
	}
	return nil
}

// hostRange is one page-locked host range: allocated with cuMemHostAlloc,
// or caller memory registered with cuMemHostRegister.
type hostRange struct {
	start, end uintptr
	p          unsafe.Pointer // start, kept as a pointer to hand back to the driver
	registered bool
}

// hostRanges is sorted by start and never overlapping.
type hostRanges []hostRange

// search returns the index of the first range starting at or after p.
func (h hostRanges) search(p uintptr) int {
	return sort.Search(len(h), func(i int) bool { return h[i].start >= p })
}

// find returns the index of the range starting exactly at p.
func (h hostRanges) find(p uintptr) (int, bool) {
	i := h.search(p)
	return i, i < len(h) && h[i].start == p
}

// contains reports whether [p, p+n) lies inside one range.
func (h hostRanges) contains(p, n uintptr) bool {
	i := h.search(p + 1) // first range starting after p; the one before may hold p
	if i == 0 {
		return false
	}
	r := h[i-1]
	return p >= r.start && p < r.end && n <= r.end-p
}

func (h hostRanges) overlaps(r hostRange) bool {
	i := h.search(r.start)
	if i < len(h) && h[i].start < r.end {
		return true
	}
	return i > 0 && h[i-1].end > r.start
}

// insert adds r unless it overlaps a range already present.
func (h *hostRanges) insert(r hostRange) bool {
	if h.overlaps(r) {
		return false
	}
	i := h.search(r.start)
	*h = append(*h, hostRange{})
	copy((*h)[i+1:], (*h)[i:])
	(*h)[i] = r
	return true
}

func (h *hostRanges) removeAt(i int) {
	*h = append((*h)[:i], (*h)[i+1:]...)
}
