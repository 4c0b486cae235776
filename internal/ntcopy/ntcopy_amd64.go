package ntcopy

// available says copyNT and sfence are real (SSE2 is part of amd64).
const available = true

// copyNT copies n bytes (a multiple of 64) from src to dst (16-byte
// aligned) with non-temporal stores.
//
//go:noescape
func copyNT(dst, src *byte, n int)

// sfence orders earlier non-temporal stores before later stores.
func sfence()

// flush is the instruction Evict uses: CLFLUSHOPT when CPUID leaf 7 says
// the processor has it, else CLFLUSH (CPUID leaf 1), else none.
var flush = func() int {
	maxLeaf, _, _, _ := cpuid(0, 0)
	_, _, _, edx1 := cpuid(1, 0)
	if maxLeaf >= 7 {
		if _, ebx7, _, _ := cpuid(7, 0); ebx7&(1<<23) != 0 {
			return flushOpt
		}
	}
	if edx1&(1<<19) != 0 {
		return flushLine
	}
	return flushNone
}()

// cpuid runs CPUID with EAX = leaf and ECX = sub.
func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

// evictLines flushes lines cache lines starting at p-back (a line
// boundary), with CLFLUSHOPT when opt is set, else CLFLUSH.
//
//go:noescape
func evictLines(p *byte, back, lines int, opt bool)
