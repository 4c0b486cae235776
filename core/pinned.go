package core

import (
	"fmt"
	"sort"
	"sync"
	"unsafe"

	"github.com/vyre-go/vyrecuda/accounting"
)

// PinnedBuffer is page-locked host memory allocated through a Backend, for
// callers that fill it directly and upload from it with
// UploadAsync. It stays valid until Free or the Backend's Close.
type PinnedBuffer struct {
	b   *Backend
	reg *pinnedRegion
}

// pinnedRegion is one range of host memory pinned through the Backend.
// Its fields other than the immutable start, n and buf are guarded by
// pinnedRegistry.mu.
type pinnedRegion struct {
	start uintptr
	p     unsafe.Pointer // start as a pointer, for the driver calls that release it
	n     int
	buf   []byte // the HostAlloc slice; nil for PinHostBuffer registrations
	// pending counts queued asynchronous uploads reading this region; it
	// must be zero to free or unpin the region.
	pending int
	gone    bool // freed or unpinned
}

func (r *pinnedRegion) contains(p uintptr, n int) bool {
	return p >= r.start && uint64(p-r.start)+uint64(n) <= uint64(r.n)
}

// pinnedRegistry records every host range pinned through a Backend.
type pinnedRegistry struct {
	// mu guards regions (sorted by start, never overlapping) and the
	// mutable fields of every region in it.
	mu      sync.Mutex
	regions []*pinnedRegion
}

func (r *pinnedRegistry) init() {}

// find returns the region holding [p, p+n), or nil; callers hold mu.
func (r *pinnedRegistry) find(p uintptr, n int) *pinnedRegion {
	i := sort.Search(len(r.regions), func(i int) bool { return r.regions[i].start > p }) - 1
	if i >= 0 && r.regions[i].contains(p, n) {
		return r.regions[i]
	}
	return nil
}

// overlaps reports whether [p, p+n) overlaps a region; callers hold mu.
func (r *pinnedRegistry) overlaps(p uintptr, n int) bool {
	end := uint64(p) + uint64(n)
	i := sort.Search(len(r.regions), func(i int) bool { return uint64(r.regions[i].start) >= end })
	return i > 0 && uint64(r.regions[i-1].start)+uint64(r.regions[i-1].n) > uint64(p)
}

// insert adds a region; callers hold mu and checked overlaps.
func (r *pinnedRegistry) insert(reg *pinnedRegion) {
	i := sort.Search(len(r.regions), func(i int) bool { return r.regions[i].start > reg.start })
	r.regions = append(r.regions, nil)
	copy(r.regions[i+1:], r.regions[i:])
	r.regions[i] = reg
}

// remove drops a region; callers hold mu.
func (r *pinnedRegistry) remove(reg *pinnedRegion) {
	for i, x := range r.regions {
		if x == reg {
			r.regions = append(r.regions[:i], r.regions[i+1:]...)
			reg.gone = true
			return
		}
	}
}

// releaseAll frees every pinned buffer and unregisters every pinned range;
// Close calls it with no asynchronous upload queued. A region the driver
// fails to release stays registered, for a later Close to retry; a region
// a quarantined direct copy may still use is left pinned. It continues past
// failures and returns the first.
func (r *pinnedRegistry) releaseAll(op string, drv Driver) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var first error
	kept := r.regions[:0]
	for _, reg := range r.regions {
		if reg.pending > 0 {
			// Only the quarantine still holds a use here (Close refused
			// queued asynchronous uploads), for a direct copy on a stream
			// settleQuarantine gave up on: the copy may still read or write
			// this memory, so it stays pinned, forgotten (and reported).
			reg.gone = true
			continue
		}
		var err error
		if reg.buf != nil {
			if err = drv.HostFree(unsafe.Pointer(unsafe.SliceData(reg.buf))); err != nil {
				err = driverError(op, "HostFree", err)
			}
		} else if err = drv.HostUnregister(reg.p); err != nil {
			err = driverError(op, "HostUnregister", err)
		}
		if err != nil {
			kept = append(kept, reg)
			if first == nil {
				first = err
			}
			continue
		}
		reg.gone = true
	}
	clear(r.regions[len(kept):])
	r.regions = kept
	return first
}

// left returns how many regions, and bytes, are still registered.
func (r *pinnedRegistry) left() (n int, bytes uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, reg := range r.regions {
		bytes += uint64(reg.n)
	}
	return len(r.regions), bytes
}

// AllocHostPinned allocates n bytes of page-locked host memory. Fill Bytes()
// and upload from it with UploadAsync; Free it when done (Close
// frees what is left).
func (b *Backend) AllocHostPinned(n int) (*PinnedBuffer, error) {
	const op = "AllocHostPinned"
	if err := b.enter(op); err != nil {
		return nil, err
	}
	defer b.exit()
	if n <= 0 {
		return nil, newError(op, KindInvalidArgument, fmt.Sprintf("requested %d bytes", n), "request at least 1 byte")
	}
	buf, err := b.drv.HostAlloc(uint64(n))
	if err != nil {
		return nil, driverError(op, "HostAlloc", err)
	}
	if len(buf) == 0 {
		return nil, nullSuccess(op, "HostAlloc")
	}
	if len(buf) != n {
		if ferr := b.drv.HostFree(unsafe.Pointer(unsafe.SliceData(buf))); ferr != nil {
			b.log.Error("freeing a wrongly sized pinned allocation failed", "op", op, "err", ferr)
		}
		return nil, newError(op, KindDriver, fmt.Sprintf("HostAlloc returned %d bytes for a request of %d", len(buf), n),
			"the driver misbehaved; report it with the driver version")
	}
	p := unsafe.Pointer(unsafe.SliceData(buf))
	reg := &pinnedRegion{start: uintptr(p), p: p, n: n, buf: buf[:n:n]}
	b.pinned.mu.Lock()
	if b.pinned.overlaps(reg.start, n) {
		b.pinned.mu.Unlock()
		if ferr := b.drv.HostFree(unsafe.Pointer(unsafe.SliceData(buf))); ferr != nil {
			b.log.Error("freeing an overlapping pinned allocation failed", "op", op, "err", ferr)
		}
		return nil, newError(op, KindDriver, fmt.Sprintf("HostAlloc returned %#x, inside memory already pinned", reg.start),
			"the driver misbehaved; report it with the driver version")
	}
	b.pinned.insert(reg)
	b.pinned.mu.Unlock()
	return &PinnedBuffer{b: b, reg: reg}, nil
}

// Bytes returns the buffer's memory, or nil once it has been freed (by Free
// or by the Backend's Close) and for a nil PinnedBuffer. Do not keep the
// slice past Free.
func (p *PinnedBuffer) Bytes() []byte {
	if p == nil {
		return nil
	}
	p.b.pinned.mu.Lock()
	defer p.b.pinned.mu.Unlock()
	if p.reg.gone {
		return nil
	}
	return p.reg.buf
}

// Len returns the buffer's length in bytes (0 for a nil PinnedBuffer).
func (p *PinnedBuffer) Len() int {
	if p == nil {
		return 0
	}
	return p.reg.n
}

// Pointer returns the address of the buffer's first byte, for
// UploadAsync (nil for a nil PinnedBuffer).
func (p *PinnedBuffer) Pointer() unsafe.Pointer {
	if p == nil {
		return nil
	}
	return unsafe.Pointer(unsafe.SliceData(p.reg.buf))
}

// Free returns the buffer's memory to the driver. It refuses with ErrInFlight
// while asynchronous uploads from it are queued or a failed direct transfer
// whose stream could not be synchronized may still use it (Free retries
// that stream first), with ErrUnknownHandle when already freed, and with
// ErrClosed after the Backend's Close (which freed it). If the driver
// fails, the buffer stays allocated.
func (p *PinnedBuffer) Free() error {
	const op = "PinnedBuffer.Free"
	if p == nil {
		return newError(op, KindInvalidArgument, "the PinnedBuffer is nil",
			"free the PinnedBuffer AllocHostPinned returned, after checking its error")
	}
	b := p.b
	if err := b.enter(op); err != nil {
		return err
	}
	defer b.exit()
	b.pinned.mu.Lock()
	if p.reg.pending > 0 && b.quar.leases.Load() > 0 {
		// A quarantined direct copy may hold it: retry the quarantine
		// (whose release takes pinned.mu), then look again.
		b.pinned.mu.Unlock()
		b.retryQuarantine()
		b.pinned.mu.Lock()
	}
	defer b.pinned.mu.Unlock()
	if p.reg.gone {
		return newError(op, KindUnknownHandle, fmt.Sprintf("pinned buffer at %#x (%d bytes) was already freed", p.reg.start, p.reg.n),
			"free each pinned buffer once")
	}
	if p.reg.pending > 0 {
		return newError(op, KindInFlight, fmt.Sprintf("%d queued copy(ies) use pinned buffer at %#x (asynchronous uploads, or a failed transfer whose stream could not be synchronized)", p.reg.pending, p.reg.start),
			"call SynchronizeUploads before freeing it (after a failed transfer, once the device recovers)")
	}
	if err := b.drv.HostFree(p.Pointer()); err != nil {
		return driverError(op, "HostFree", err)
	}
	b.pinned.remove(p.reg)
	return nil
}

// PinHostBuffer page-locks n bytes of caller memory starting at p (memory
// from C, mmap or a Go allocation kept alive by the caller), so
// UploadAsync can copy from it. The memory must stay valid until
// UnpinHostBuffer or the Backend's Close. Ranges must not overlap ones
// already pinned through this Backend.
func (b *Backend) PinHostBuffer(p unsafe.Pointer, n int) error {
	const op = "PinHostBuffer"
	if err := b.enter(op); err != nil {
		return err
	}
	defer b.exit()
	if p == nil {
		return newError(op, KindInvalidArgument, "pointer is nil", "pass the first byte of the memory to pin")
	}
	if n <= 0 {
		return newError(op, KindInvalidArgument, fmt.Sprintf("length %d bytes", n), "pin at least 1 byte")
	}
	start := uintptr(p)
	if _, err := accounting.AddUint64(uint64(start), uint64(n)); err != nil || uint64(start)+uint64(n) > uint64(^uintptr(0)) {
		return newError(op, KindInvalidArgument, fmt.Sprintf("%d bytes at %#x wrap the address space", n, start),
			"pass a valid address and length")
	}
	b.pinned.mu.Lock()
	defer b.pinned.mu.Unlock()
	if b.pinned.overlaps(start, n) {
		return newError(op, KindInvalidArgument, fmt.Sprintf("[%#x, %#x) overlaps memory already pinned through this Backend", start, uint64(start)+uint64(n)),
			"pin each range once, or unpin it first")
	}
	// The driver call runs under pinned.mu so no overlapping range can be
	// registered between the check and the insert; registration does not
	// wait on any stream.
	if err := b.drv.HostRegister(p, uint64(n)); err != nil {
		return driverError(op, "HostRegister", err)
	}
	b.pinned.insert(&pinnedRegion{start: start, p: p, n: n})
	return nil
}

// UnpinHostBuffer undoes PinHostBuffer for the range starting at p. It
// refuses with ErrInFlight while asynchronous uploads from the range are
// queued or a failed direct transfer whose stream could not be synchronized
// may still use it (it retries that stream first), and with
// ErrInvalidArgument when p does not start a range pinned with
// PinHostBuffer on this Backend.
func (b *Backend) UnpinHostBuffer(p unsafe.Pointer) error {
	const op = "UnpinHostBuffer"
	if err := b.enter(op); err != nil {
		return err
	}
	defer b.exit()
	start := uintptr(p)
	b.pinned.mu.Lock()
	reg := b.pinned.find(start, 0)
	if reg != nil && reg.pending > 0 && b.quar.leases.Load() > 0 {
		// As in PinnedBuffer.Free.
		b.pinned.mu.Unlock()
		b.retryQuarantine()
		b.pinned.mu.Lock()
		reg = b.pinned.find(start, 0)
	}
	defer b.pinned.mu.Unlock()
	if p == nil || reg == nil || reg.start != start || reg.buf != nil {
		return newError(op, KindInvalidArgument, fmt.Sprintf("address %#x does not start a range pinned with PinHostBuffer on this Backend", start),
			"pass the pointer given to PinHostBuffer; free AllocHostPinned buffers with their Free method")
	}
	if reg.pending > 0 {
		return newError(op, KindInFlight, fmt.Sprintf("%d queued copy(ies) use the range at %#x (asynchronous uploads, or a failed transfer whose stream could not be synchronized)", reg.pending, start),
			"call SynchronizeUploads before unpinning (after a failed transfer, once the device recovers)")
	}
	if err := b.drv.HostUnregister(p); err != nil {
		return driverError(op, "HostUnregister", err)
	}
	b.pinned.remove(reg)
	return nil
}
