package copyjob

import (
	"fmt"
	"testing"

	"github.com/vyre-go/vyrecuda/internal/ntcopy"
)

// BenchmarkHostCopy times ParallelCopy, back to back (so the helpers stay
// awake, as between the calls of a stream of transfers), of the sizes
// single transfers stage, on 1 to 8 goroutines, with the built-in copy and
// with non-temporal stores (as staged uploads copy). It needs no device:
// run it on the device host to calibrate xferplan's copy rates.
func BenchmarkHostCopy(b *testing.B) {
	for _, n := range []int{64 << 10, 128 << 10, 256 << 10, 1 << 20} {
		for _, w := range []int{1, 2, 4, 8} {
			for _, nt := range []bool{false, true} {
				cp := func(dst, src []byte) { copy(dst, src) }
				if nt {
					cp = func(dst, src []byte) {
						ntcopy.Copy(dst, src)
						ntcopy.Fence()
					}
				}
				b.Run(fmt.Sprintf("%dKiB/w%d/nt=%v", n>>10, w, nt), func(b *testing.B) {
					src, dst := make([]byte, n), make([]byte, n)
					for i := range src {
						src[i] = byte(i)
					}
					b.SetBytes(int64(n))
					b.ResetTimer()
					for range b.N {
						ParallelCopy(dst, src, w, DefaultLinger, cp)
					}
				})
			}
		}
	}
}
