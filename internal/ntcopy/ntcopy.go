// Package ntcopy copies memory with non-temporal stores: the destination's
// bytes go to memory without being kept (dirty) in the processor's caches.
//
// It exists for buffers that a device reads by DMA right after the copy. A
// DMA that reads lines another core holds modified has to fetch them from
// that core's cache, which on the reference H100 host ran a packed upload's
// DMA at about half its speed from memory. Go's copy switches to
// non-temporal stores only for copies of 1 MiB and more, so many small
// pieces packed into one staging block stay in the caches.
//
// On amd64 the body of each copy (its 16-byte aligned, 64-byte multiple
// middle) uses MOVNTDQ; the ragged ends, and every copy on other
// architectures, use the built-in copy. Non-temporal stores are weakly
// ordered: call Fence after a run of copies, before another goroutine or
// a device may read what they wrote.
//
// ReadOnce is the other direction: a copy out of a buffer that a device
// will write by DMA next. Its source is fetched with non-temporal prefetch
// hints, so fewer of its lines stay in the cores' caches, where the next
// DMA write to them would first have to invalidate them.
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

// ReadOnce copies min(len(dst), len(src)) bytes from src to dst, fetching
// src with non-temporal prefetch hints, and returns that count. dst is
// written with ordinary stores. Overlapping dst and src are not supported.
func ReadOnce(dst, src []byte) int {
	n := min(len(dst), len(src))
	if !available || n < MinBytes {
		return copy(dst, src)
	}
	body := n &^ 63
	copyNTA(&dst[0], &src[0], body)
	copy(dst[body:n], src[body:n])
	return n
}
