package sim

import "github.com/vyre-go/vyrecuda/cudaapi"

// MemCached implements core.CacheNotifier: with Config.PoisonCache, the
// allocation at ptr is filled with PoisonByte and refused to copies,
// memsets and kernels until MemReused. Without the option, or for an
// address that is not the base of a live allocation, it does nothing. It is
// neither counted nor subject to faults.
func (d *Device) MemCached(ptr, n uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.cfg.PoisonCache {
		return
	}
	if a, ok := d.allocs[ptr]; ok {
		a.cached = true
		for i := range a.data {
			a.data[i] = PoisonByte
		}
	}
}

// MemReused implements core.CacheNotifier: the allocation at ptr may be
// used again. Its bytes keep the poison until written.
func (d *Device) MemReused(ptr, n uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if a, ok := d.allocs[ptr]; ok {
		a.cached = false
	}
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
