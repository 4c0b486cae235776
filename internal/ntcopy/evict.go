package ntcopy

import "unsafe"

// LineBytes is the cache line size Evict assumes (64 on every amd64
// processor).
const LineBytes = 64

// Evict writes back (if modified) and drops from every level of every
// processor's caches each cache line that holds a byte of b, without
// changing any byte's value: lines shared with bytes just outside b are
// evicted too, but their contents stay as they were. It is a performance
// hint only, for memory that a device writes by DMA next: a DMA that
// writes lines held in several cores' caches has to invalidate each copy.
//
// On amd64 it uses CLFLUSHOPT where the processor has it (weakly ordered:
// many flushes proceed at once) and CLFLUSH otherwise; on other
// architectures it does nothing. Use Available to tell.
func Evict(b []byte) {
	if flush == flushNone || len(b) == 0 {
		return
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	lo := p &^ (LineBytes - 1)
	lines := int((p + uintptr(len(b)) - lo + LineBytes - 1) / LineBytes)
	// lo may lie before b's first byte, in memory b does not own: the
	// assembly takes b's own pointer and steps back to the line start, so
	// no Go pointer outside b is ever formed. Lines never cross a page,
	// so every line flushed lies in a page that holds a byte of b.
	evictLines(unsafe.SliceData(b), int(p-lo), lines, flush == flushOpt)
}

// EvictAvailable reports whether Evict does anything on this processor.
func EvictAvailable() bool { return flush != flushNone }

// The instruction Evict uses.
const (
	flushNone = iota
	flushLine // CLFLUSH
	flushOpt  // CLFLUSHOPT
)
