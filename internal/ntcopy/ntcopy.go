// Package ntcopy copies memory with non-temporal stores: the destination's
// bytes go to memory without being kept (dirty) in the processor's caches.
//
// It exists for buffers that a device reads by DMA right after the copy: a
// DMA that reads lines another core holds modified has to fetch them from
// that core's cache, and the copy itself first reads every destination
// line it writes. Go's copy switches to non-temporal stores only for
// copies of 1 MiB and more, so many small pieces packed into one staging
// block stay in the caches. On the reference H100 host, packing 1024 x 4
// KiB pieces this way took 50 us instead of 104, and the wait for the
// DMAs after the packing 84 us instead of 117.
//
// On amd64 the body of each copy (its 16-byte aligned, 64-byte multiple
// middle) uses MOVNTDQ; the ragged ends, and every copy on other
// architectures, use the built-in copy. Non-temporal stores are weakly
// ordered: call Fence after a run of copies, before another goroutine or
// a device may read what they wrote.
//
// Copy also suits a large destination that will not be read again soon:
// skipping the read of each destination line before writing it saves
// memory bandwidth.
//
// Evict is the counterpart for memory a device writes by DMA: after the
// processor has read such a buffer, its lines sit (clean) in the caches of
// every core that read them, and the next DMA into it has to invalidate
// each copy. Evict drops them from the caches at once.
package ntcopy

import "unsafe"

// MinBytes is the shortest copy Copy makes with non-temporal stores;
// shorter ones use the built-in copy.
const MinBytes = 256

// Copy copies min(len(dst), len(src)) bytes from src to dst and returns
// that count. Overlapping dst and src are not supported.
func Copy(dst, src []byte) int {
	n := min(len(dst), len(src))
	if !available || n < MinBytes {
		return copy(dst, src)
	}
	head := int(-uintptr(unsafe.Pointer(unsafe.SliceData(dst))) & 15)
	copy(dst[:head], src[:head])
	body := (n - head) &^ 63
	if body > 0 {
		copyNT(&dst[head], &src[head], body)
	}
	copy(dst[head+body:n], src[head+body:n])
	return n
}

// Fence orders every non-temporal store made so far by this goroutine's
// thread before its later stores (an SFENCE on amd64; nothing elsewhere).
// Call it before publishing the copied bytes.
func Fence() {
	if available {
		sfence()
	}
}
