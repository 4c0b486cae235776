package sim

import (
	"math"
	"slices"
	"unsafe"

	"github.com/vyre-go/vyrecuda/cudaapi"
)

// PoisonByte fills pinned host memory when HostFree releases it, so a caller
// that keeps using freed staging memory reads an unmistakable pattern.
const PoisonByte = 0xDB

// allocation is one live device allocation.
type allocation struct {
	base uint64
	data []byte
	// cached is set while a Backend holds the allocation in a cache and
	// Config.PoisonCache is on: access to it is refused (poison.go).
	cached bool
}

func (a *allocation) end() uint64 { return a.base + uint64(len(a.data)) }

// MemAlloc allocates n bytes of zeroed device memory at a fresh address:
// never 0, aligned to 256, never handed out before, and followed by a gap so
// an address one past the end is inside no allocation. Past TotalMemory it
// fails with CUDA_ERROR_OUT_OF_MEMORY.
func (d *Device) MemAlloc(n uint64) (uint64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(OpMemAlloc); done {
		return 0, err
	}
	if n == 0 {
		return 0, fail(OpMemAlloc, cudaapi.CUDA_ERROR_INVALID_VALUE, "size is 0")
	}
	free := d.cfg.TotalMemory - d.allocated
	if n > free {
		return 0, fail(OpMemAlloc, cudaapi.CUDA_ERROR_OUT_OF_MEMORY,
			"requested %d bytes, %d free of %d", n, free, d.cfg.TotalMemory)
	}
	// The span rounds n up to the alignment and adds one aligned gap, so
	// the next allocation never starts right after this one ends.
	if n > math.MaxUint64-2*deviceAddressAlign {
		return 0, fail(OpMemAlloc, cudaapi.CUDA_ERROR_OUT_OF_MEMORY, "requested %d bytes", n)
	}
	span := (n + 2*deviceAddressAlign - 1) &^ (deviceAddressAlign - 1)
	base, ok := newAddress(span)
	if !ok {
		return 0, fail(OpMemAlloc, cudaapi.CUDA_ERROR_OUT_OF_MEMORY, "simulated address space exhausted")
	}
	a := &allocation{base: base, data: make([]byte, n)}
	d.allocs[a.base] = a
	d.sorted = append(d.sorted, a)
	d.allocated += n
	return a.base, nil
}

// MemFree frees an allocation by its base address. Unknown, interior and
// already freed addresses fail with CUDA_ERROR_INVALID_VALUE.
func (d *Device) MemFree(ptr uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(OpMemFree); done {
		return err
	}
	a, ok := d.allocs[ptr]
	if !ok {
		if in := d.allocationAt(ptr); in != nil {
			return fail(OpMemFree, cudaapi.CUDA_ERROR_INVALID_VALUE,
				"0x%x is inside the allocation at 0x%x, not its base", ptr, in.base)
		}
		return fail(OpMemFree, cudaapi.CUDA_ERROR_INVALID_VALUE,
			"0x%x is not a live allocation (never allocated or already freed)", ptr)
	}
	delete(d.allocs, ptr)
	if i, found := d.sortedIndex(ptr); found {
		d.sorted = slices.Delete(d.sorted, i, i+1)
	}
	d.allocated -= uint64(len(a.data))
	return nil
}

func (d *Device) sortedIndex(base uint64) (int, bool) {
	return slices.BinarySearchFunc(d.sorted, base, func(a *allocation, b uint64) int {
		switch {
		case a.base < b:
			return -1
		case a.base > b:
			return 1
		}
		return 0
	})
}

// allocationAt returns the live allocation holding address p, or nil.
func (d *Device) allocationAt(p uint64) *allocation {
	i, found := d.sortedIndex(p)
	if found {
		return d.sorted[i]
	}
	if i == 0 {
		return nil
	}
	a := d.sorted[i-1]
	if p < a.end() {
		return a
	}
	return nil
}

// deviceRange returns the n bytes at ptr when they lie inside one live
// allocation. A zero-length range is valid anywhere inside or at the end of
// an allocation.
func (d *Device) deviceRange(ptr, n uint64) ([]byte, bool) {
	if ptr == 0 || n > math.MaxUint64-ptr {
		return nil, false
	}
	a := d.allocationAt(ptr)
	if a == nil {
		if n == 0 {
			if i, _ := d.sortedIndex(ptr); i > 0 && d.sorted[i-1].end() == ptr {
				return []byte{}, true
			}
		}
		return nil, false
	}
	if ptr+n > a.end() {
		return nil, false
	}
	off := ptr - a.base
	return a.data[off : off+n : off+n], true
}

// mappedHost returns the n bytes at host address ptr when the device maps
// pinned host memory (Capabilities.MappedPinnedHost) and they lie inside
// one live HostAlloc block. Callers hold mu.
func (d *Device) mappedHost(ptr uint64, n int) ([]byte, bool) {
	if !d.caps.MappedPinnedHost || n < 0 || ptr == 0 || uint64(n) > math.MaxUint64-ptr {
		return nil, false
	}
	i := d.pinned.containing(uintptr(ptr), uintptr(n))
	if i < 0 {
		return nil, false
	}
	r := d.pinned[i]
	off := uintptr(ptr) - r.start
	return r.buf[off : off+uintptr(n) : off+uintptr(n)], true
}

func (d *Device) rangeDetail(ptr, n uint64) string {
	if a := d.allocationAt(ptr); a != nil {
		return sprintf("[0x%x, +%d) runs past the end of the %d-byte allocation at 0x%x",
			ptr, n, len(a.data), a.base)
	}
	return sprintf("[0x%x, +%d) is not inside a live allocation", ptr, n)
}

// ReadDevice returns a copy of n bytes of device memory at ptr, bypassing
// streams: it sees memory as it is now, without running queued work. The
// range must lie inside one live allocation. It is a test helper, not a
// Driver method, and is neither counted nor subject to faults.
func (d *Device) ReadDevice(ptr uint64, n int) ([]byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if n < 0 {
		return nil, &Error{Op: opReadDevice, Code: cudaapi.CUDA_ERROR_INVALID_VALUE, Detail: sprintf("negative length %d", n)}
	}
	b, ok := d.deviceRange(ptr, uint64(n))
	if !ok {
		return nil, &Error{Op: opReadDevice, Code: cudaapi.CUDA_ERROR_INVALID_VALUE, Detail: d.rangeDetail(ptr, uint64(n))}
	}
	return slices.Clone(b), nil
}

// WriteDevice copies data into device memory at ptr, bypassing streams:
// queued work that runs later still sees (and may overwrite) these bytes.
// The range must lie inside one live allocation. It is a test helper, not a
// Driver method, and is neither counted nor subject to faults.
func (d *Device) WriteDevice(ptr uint64, data []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	b, ok := d.deviceRange(ptr, uint64(len(data)))
	if !ok {
		return &Error{Op: opWriteDevice, Code: cudaapi.CUDA_ERROR_INVALID_VALUE, Detail: d.rangeDetail(ptr, uint64(len(data)))}
	}
	copy(b, data)
	return nil
}

// hostRange is a span of host memory the device may access asynchronously.
type hostRange struct {
	start, end uintptr
	buf        []byte // the HostAlloc slice, kept so the memory stays reachable
	// cached is set while a Backend holds a HostAlloc block in its staging
	// cache and Config.PoisonCache is on (poison.go).
	cached bool
}

// rangeSet is a set of non-overlapping host ranges sorted by start.
type rangeSet []hostRange

func (s rangeSet) search(p uintptr) (int, bool) {
	return slices.BinarySearchFunc(s, p, func(r hostRange, p uintptr) int {
		switch {
		case r.start < p:
			return -1
		case r.start > p:
			return 1
		}
		return 0
	})
}

// containing returns the index of the range holding [p, p+n), or -1.
func (s rangeSet) containing(p, n uintptr) int {
	i, found := s.search(p)
	if !found {
		i--
	}
	if i < 0 || i >= len(s) {
		return -1
	}
	if r := s[i]; p >= r.start && p < r.end && n <= r.end-p {
		return i
	}
	return -1
}

// overlaps reports whether [p, p+n) intersects any range.
func (s rangeSet) overlaps(p, n uintptr) bool {
	i, _ := s.search(p)
	if i < len(s) && s[i].start < p+n {
		return true
	}
	return i > 0 && s[i-1].end > p
}

func (s *rangeSet) insert(r hostRange) {
	i, _ := s.search(r.start)
	*s = slices.Insert(*s, i, r)
}

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// HostAlloc allocates n bytes of simulated page-locked memory: a Go slice the
// device tracks until HostFree. Past Config.PinnedLimit bytes live at once it
// fails with CUDA_ERROR_OUT_OF_MEMORY.
func (d *Device) HostAlloc(n uint64) ([]byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(OpHostAlloc); done {
		return nil, err
	}
	if n == 0 {
		return nil, fail(OpHostAlloc, cudaapi.CUDA_ERROR_INVALID_VALUE, "size is 0")
	}
	if n > d.cfg.PinnedLimit-d.pinnedBytes || n > math.MaxInt {
		return nil, fail(OpHostAlloc, cudaapi.CUDA_ERROR_OUT_OF_MEMORY,
			"requested %d pinned bytes, %d of the %d-byte pinned limit in use",
			n, d.pinnedBytes, d.cfg.PinnedLimit)
	}
	buf := make([]byte, n)
	start := addrOf(buf)
	d.pinned.insert(hostRange{start: start, end: start + uintptr(n), buf: buf})
	d.pinnedBytes += n
	return buf, nil
}

// HostFree frees memory from HostAlloc, given its first byte. The memory is
// filled with PoisonByte before it is forgotten.
func (d *Device) HostFree(p unsafe.Pointer) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(OpHostFree); done {
		return err
	}
	if p == nil {
		return fail(OpHostFree, cudaapi.CUDA_ERROR_INVALID_VALUE, "nil pointer")
	}
	i, found := d.pinned.search(uintptr(p))
	if !found {
		if d.pinned.containing(uintptr(p), 1) >= 0 {
			return fail(OpHostFree, cudaapi.CUDA_ERROR_INVALID_VALUE,
				"%p is inside a pinned buffer, not its first byte", p)
		}
		return fail(OpHostFree, cudaapi.CUDA_ERROR_INVALID_VALUE,
			"%p is not a live HostAlloc buffer (never allocated or already freed)", p)
	}
	buf := d.pinned[i].buf
	for j := range buf {
		buf[j] = PoisonByte
	}
	d.pinned = slices.Delete(d.pinned, i, i+1)
	d.pinnedBytes -= uint64(len(buf))
	return nil
}

// HostRegister records [p, p+n) as page-locked caller memory. A range that
// overlaps a registered range or a HostAlloc buffer fails with
// CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED.
func (d *Device) HostRegister(p unsafe.Pointer, n uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(OpHostRegister); done {
		return err
	}
	start := uintptr(p)
	if p == nil || n == 0 || n > uint64(math.MaxUint64-uint64(start)) || uint64(uintptr(n)) != n {
		return fail(OpHostRegister, cudaapi.CUDA_ERROR_INVALID_VALUE, "bad range %p, %d bytes", p, n)
	}
	if d.registered.overlaps(start, uintptr(n)) || d.pinned.overlaps(start, uintptr(n)) {
		return fail(OpHostRegister, cudaapi.CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
			"[%p, +%d) overlaps memory that is already page-locked", p, n)
	}
	d.registered.insert(hostRange{start: start, end: start + uintptr(n)})
	return nil
}

// HostUnregister forgets the registered range starting at p. Any other
// address fails with CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED.
func (d *Device) HostUnregister(p unsafe.Pointer) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if done, err := d.admit(OpHostUnregister); done {
		return err
	}
	i, found := d.registered.search(uintptr(p))
	if p == nil || !found {
		return fail(OpHostUnregister, cudaapi.CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
			"%p does not start a registered range", p)
	}
	d.registered = slices.Delete(d.registered, i, i+1)
	return nil
}

// hostUsable reports whether an asynchronous copy may use b: it lies inside
// one pinned buffer or registered range, or pageable memory is allowed.
func (d *Device) hostUsable(b []byte) bool {
	if len(b) == 0 || d.cfg.AllowPageable {
		return true
	}
	p, n := addrOf(b), uintptr(len(b))
	if d.pinned.containing(p, n) >= 0 || d.registered.containing(p, n) >= 0 {
		return true
	}
	// Page-locked memory is portable: every device of a Machine may use
	// what any of them pinned, as with CU_MEMHOSTALLOC_PORTABLE.
	for _, o := range d.machine.devs {
		if o != d && (o.pinned.containing(p, n) >= 0 || o.registered.containing(p, n) >= 0) {
			return true
		}
	}
	return false
}
