package sim

import "github.com/vyre-go/vyrecuda/cudaapi"

// MemCached implements driver.CacheNotifier: with Config.PoisonCache, the
// allocation at ptr is filled with PoisonByte and refused to copies,
// memsets and kernels until MemReused. Without the option, or for an
// address that is not the base of a live allocation, it does nothing. It is
// neither counted nor subject to faults.
func (d *Device) MemCached(ptr, n uint64) {
	// cfg never changes after New, so it is read without the lock: with
	// poisoning off a notification costs nothing on the Backend's hot path.
	if !d.cfg.PoisonCache {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if a, ok := d.allocs[ptr]; ok {
		a.cached = true
		poison(a.data)
	}
}

// MemReused implements driver.CacheNotifier: the allocation at ptr may be
// used again. Its bytes keep the poison until written.
func (d *Device) MemReused(ptr, n uint64) {
	if !d.cfg.PoisonCache {
		return // nothing was marked cached
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if a, ok := d.allocs[ptr]; ok {
		a.cached = false
	}
}

// HostCached implements driver.CacheNotifier: with Config.PoisonCache, the
// HostAlloc block holding buf is filled with PoisonByte and refused to
// asynchronous copies until HostReused. Otherwise it does nothing.
func (d *Device) HostCached(buf []byte) {
	if !d.cfg.PoisonCache || len(buf) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if i := d.pinned.containing(addrOf(buf), uintptr(len(buf))); i >= 0 {
		d.pinned[i].cached = true
		poison(d.pinned[i].buf)
	}
}

// HostReused implements driver.CacheNotifier: the block holding buf may be
// used again.
func (d *Device) HostReused(buf []byte) {
	if !d.cfg.PoisonCache || len(buf) == 0 {
		return // nothing was marked cached
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if i := d.pinned.containing(addrOf(buf), uintptr(len(buf))); i >= 0 {
		d.pinned[i].cached = false
	}
}

// checkHostCached refuses an asynchronous copy using host memory inside a
// pinned block a Backend holds in its staging cache. Callers hold mu.
func (d *Device) checkHostCached(o Op, what string, b []byte) *Error {
	if len(b) == 0 {
		return nil
	}
	if i := d.pinned.containing(addrOf(b), uintptr(len(b))); i >= 0 && d.pinned[i].cached {
		return fail(o, cudaapi.CUDA_ERROR_ILLEGAL_ADDRESS,
			"%s [%#x, +%d) lies in a pinned block the Backend returned to its staging cache: a use after free (Config.PoisonCache)",
			what, addrOf(b), len(b))
	}
	return nil
}

// checkCached refuses access to n bytes at ptr inside an allocation a
// Backend holds in a cache. Callers hold mu.
func (d *Device) checkCached(o Op, what string, ptr, n uint64) *Error {
	if a := d.allocationAt(ptr); a != nil && a.cached {
		return fail(o, cudaapi.CUDA_ERROR_ILLEGAL_ADDRESS,
			"%s [0x%x, +%d) lies in the %d-byte allocation at 0x%x, which the Backend returned to its cache: a use after free (Config.PoisonCache)",
			what, ptr, n, len(a.data), a.base)
	}
	return nil
}

// Poisoned reports whether the allocation holding ptr is currently held in
// a Backend's cache and poisoned (Config.PoisonCache). It is a test helper,
// neither counted nor subject to faults.
func (d *Device) Poisoned(ptr uint64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	a := d.allocationAt(ptr)
	return a != nil && a.cached
}

// poison fills b with PoisonByte by doubling copies, so large blocks cost a
// few memmoves rather than a byte loop.
func poison(b []byte) {
	if len(b) == 0 {
		return
	}
	b[0] = PoisonByte
	for n := 1; n < len(b); n *= 2 {
		copy(b[n:], b[:n])
	}
}
