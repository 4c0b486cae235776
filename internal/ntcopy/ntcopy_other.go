//go:build !amd64

package ntcopy

// available says copyNT and sfence are real; elsewhere Copy uses copy.
const available = false

func copyNT(dst, src *byte, n int) { panic("ntcopy: no non-temporal copy on this architecture") }

func sfence() {}

// flush: no cache line flushes on this architecture.
const flush = flushNone

func evictLines(p *byte, back, lines int, opt bool) {}
