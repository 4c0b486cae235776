package hostmem

import (
	"errors"
	"sort"
	"sync"
	"unsafe"

	"github.com/vyre-go/vyrecuda/core/internal/errs"
)

// Region is one range of host memory pinned through a Backend: a buffer
// HostAlloc returned (Registry.AddAlloc) or caller memory page-locked with
// HostRegister (Registry.Register). Its start, length and buffer never
// change; its uses and state are guarded by its Registry's lock.
type Region struct {
	start uintptr
	p     unsafe.Pointer // start as a pointer, for the driver calls that release it
	n     int
	buf   []byte // the HostAlloc slice; nil for caller memory
	// pending counts queued copies reading or writing this region (Use,
	// Done); it must be zero to free or unpin the region.
	pending int
	gone    bool // freed or unpinned
}

// Start returns the address of the region's first byte.
func (r *Region) Start() uintptr { return r.start }

// Allocated reports whether the region is memory from HostAlloc (not
// caller memory pinned in place).
func (r *Region) Allocated() bool { return r.buf != nil }

// Pointer returns the region's first byte as a pointer.
func (r *Region) Pointer() unsafe.Pointer { return r.p }

// Len returns the region's length in bytes.
func (r *Region) Len() int { return r.n }

func (r *Region) contains(p uintptr, n int) bool {
	return p >= r.start && uint64(p-r.start)+uint64(n) <= uint64(r.n)
}

// Errors the Registry returns; callers turn them into their operation's
// error.
var (
	// ErrOverlap: the range overlaps a region already registered.
	ErrOverlap = errors.New("hostmem: the range overlaps memory already pinned")
	// ErrGone: the region was already freed or unpinned.
	ErrGone = errors.New("hostmem: the region was already released")
	// ErrNotRegistered: the address does not start caller memory
	// registered with Register.
	ErrNotRegistered = errors.New("hostmem: the address does not start a registered range")
)

// InUseError refuses to release a region that queued copies still use.
type InUseError struct {
	Pending int // the copies counted by Use and not yet by Done
}

// Error describes the refusal.
func (e *InUseError) Error() string { return "hostmem: the region is in use by queued copies" }

// Registry records every host range pinned through a Backend, never
// overlapping, with the queued copies that use each. It is safe for
// concurrent use; driver calls that pin or release a region run under its
// lock, so no overlapping range is registered meanwhile.
type Registry struct {
	// mu guards regions (sorted by start, never overlapping) and the
	// mutable fields of every region in it.
	mu      sync.Mutex
	regions []*Region
}

// find returns the region holding [p, p+n), or nil; callers hold mu.
func (r *Registry) find(p uintptr, n int) *Region {
	i := sort.Search(len(r.regions), func(i int) bool { return r.regions[i].start > p }) - 1
	if i >= 0 && r.regions[i].contains(p, n) {
		return r.regions[i]
	}
	return nil
}

// overlaps reports whether [p, p+n) overlaps a region; callers hold mu.
func (r *Registry) overlaps(p uintptr, n int) bool {
	end := uint64(p) + uint64(n)
	i := sort.Search(len(r.regions), func(i int) bool { return uint64(r.regions[i].start) >= end })
	return i > 0 && uint64(r.regions[i-1].start)+uint64(r.regions[i-1].n) > uint64(p)
}

// insert adds a region; callers hold mu and checked overlaps.
func (r *Registry) insert(reg *Region) {
	i := sort.Search(len(r.regions), func(i int) bool { return r.regions[i].start > reg.start })
	r.regions = append(r.regions, nil)
	copy(r.regions[i+1:], r.regions[i:])
	r.regions[i] = reg
}

// remove drops a region and marks it gone; callers hold mu.
func (r *Registry) remove(reg *Region) {
	for i, x := range r.regions {
		if x == reg {
			r.regions = append(r.regions[:i], r.regions[i+1:]...)
			reg.gone = true
			return
		}
	}
}

// AddAlloc registers buf (non-empty), which HostAlloc just returned, and
// returns its region; ErrOverlap when it lies inside memory already
// registered (the caller then frees it).
func (r *Registry) AddAlloc(buf []byte) (*Region, error) {
	p := unsafe.Pointer(unsafe.SliceData(buf))
	reg := &Region{start: uintptr(p), p: p, n: len(buf), buf: buf[:len(buf):len(buf)]}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.overlaps(reg.start, reg.n) {
		return nil, ErrOverlap
	}
	r.insert(reg)
	return reg, nil
}

// Register page-locks n > 0 bytes of caller memory at p with pin and
// registers them. It returns ErrOverlap when the range overlaps one already
// registered (pin is not called), or pin's error (nothing registered).
func (r *Registry) Register(p unsafe.Pointer, n int, pin func(p unsafe.Pointer, n uint64) error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.overlaps(uintptr(p), n) {
		return ErrOverlap
	}
	if err := pin(p, uint64(n)); err != nil {
		return err
	}
	r.insert(&Region{start: uintptr(p), p: p, n: n})
	return nil
}

// Bytes returns reg's HostAlloc memory, or nil once it is gone (and for
// caller memory).
func (r *Registry) Bytes(reg *Region) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	if reg.gone {
		return nil
	}
	return reg.buf
}

// Use returns the region that holds all of [p, p+n), with one more use
// counted so it cannot be freed or unpinned until Done, or nil when no
// region holds it (or n is 0).
func (r *Registry) Use(p uintptr, n int) *Region {
	if n == 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.regions) == 0 {
		return nil
	}
	reg := r.find(p, n)
	if reg != nil {
		reg.pending++
	}
	return reg
}

// Done ends one use of each of regs, which Use counted.
func (r *Registry) Done(regs ...*Region) {
	r.mu.Lock()
	for _, reg := range regs {
		reg.pending--
	}
	r.mu.Unlock()
}

// Free frees reg, a region AddAlloc returned, with free (the driver's
// HostFree) and drops it. When copies still use reg, settle runs first,
// without the lock, for uses that may have ended; the region is then
// refused with an *InUseError if still used, or ErrGone if already
// released. A failure of free is returned as is and leaves reg registered.
func (r *Registry) Free(reg *Region, settle func(), free func(p unsafe.Pointer) error) error {
	r.mu.Lock()
	if reg.pending > 0 && settle != nil {
		r.mu.Unlock()
		settle()
		r.mu.Lock()
	}
	defer r.mu.Unlock()
	if reg.gone {
		return ErrGone
	}
	if reg.pending > 0 {
		return &InUseError{Pending: reg.pending}
	}
	if err := free(reg.p); err != nil {
		return err
	}
	r.remove(reg)
	return nil
}

// Unregister unpins the caller memory Register registered at p with unpin
// (the driver's HostUnregister) and drops it. ErrNotRegistered when p does
// not start such a range; settle and *InUseError as in Free. A failure of
// unpin is returned as is and leaves the range registered.
func (r *Registry) Unregister(p unsafe.Pointer, settle func(), unpin func(p unsafe.Pointer) error) error {
	start := uintptr(p)
	r.mu.Lock()
	reg := r.find(start, 0)
	if reg != nil && reg.pending > 0 && settle != nil {
		r.mu.Unlock()
		settle()
		r.mu.Lock()
		reg = r.find(start, 0)
	}
	defer r.mu.Unlock()
	if p == nil || reg == nil || reg.start != start || reg.buf != nil {
		return ErrNotRegistered
	}
	if reg.pending > 0 {
		return &InUseError{Pending: reg.pending}
	}
	if err := unpin(p); err != nil {
		return err
	}
	r.remove(reg)
	return nil
}

// Releaser is what ReleaseAll needs of a driver (driver.Driver has it).
type Releaser interface {
	HostFree(p unsafe.Pointer) error
	HostUnregister(p unsafe.Pointer) error
}

// ReleaseAll frees every HostAlloc region and unregisters every caller
// range; core's Close calls it with no asynchronous upload queued. A region
// the driver fails to release stays registered, for a later call to retry;
// a region a copy may still use (only one a quarantined direct copy holds)
// is left pinned, forgotten. It continues past failures and returns the
// first, named op.
func (r *Registry) ReleaseAll(op string, drv Releaser) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var first error
	kept := r.regions[:0]
	for _, reg := range r.regions {
		if reg.pending > 0 {
			// Only the quarantine still holds a use here (Close refused
			// queued asynchronous uploads), for a direct copy on a stream
			// core gave up on: the copy may still read or write this
			// memory, so it stays pinned, forgotten (and reported).
			reg.gone = true
			continue
		}
		var err error
		if reg.buf != nil {
			if err = drv.HostFree(reg.p); err != nil {
				err = errs.Driver(op, "HostFree", err)
			}
		} else if err = drv.HostUnregister(reg.p); err != nil {
			err = errs.Driver(op, "HostUnregister", err)
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

// Left returns how many regions, and bytes, are still registered.
func (r *Registry) Left() (n int, bytes uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, reg := range r.regions {
		bytes += uint64(reg.n)
	}
	return len(r.regions), bytes
}
