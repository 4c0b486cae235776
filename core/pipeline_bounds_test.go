package core

import (
	"math/rand"
	"testing"
)

// TestChunkBoundsContract checks chunkBounds against its documented
// contract over random sizes and tunings, beside the fixed cases of
// TestChunkBoundsTaperTheExposedEnd: the chunks cover [0, n) in order, none
// is empty or larger than a chunk; with a taper, the chunk at the exposed end
// is min(taper, n), the first two there are equal, each next one at most
// doubles and never shrinks until the chunk size, and only the chunk at the
// far end may be a smaller remainder.
func TestChunkBoundsContract(t *testing.T) {
	rng := rand.New(rand.NewSource(20251123))
	for range 3000 {
		chunk := 1 + rng.Intn(1<<12)
		tune := transferTuning{chunk: chunk, taper: -1}
		if rng.Intn(5) > 0 && chunk > 1 {
			tune.taper = 1 + rng.Intn(chunk-1)
		}
		n := 1 + rng.Intn(20*chunk)
		atEnd := rng.Intn(2) == 0
		b := tune.chunkBounds(n, atEnd)
		if len(b) < 2 || b[0] != 0 || b[len(b)-1] != n {
			t.Fatalf("chunkBounds(%d, %v) with %+v = %v: must run from 0 to n", n, atEnd, tune, b)
		}
		sizes := make([]int, len(b)-1)
		for k := range sizes {
			sizes[k] = b[k+1] - b[k]
			if sizes[k] <= 0 || sizes[k] > chunk {
				t.Fatalf("chunkBounds(%d, %v) with %+v = %v: chunk %d of %d bytes", n, atEnd, tune, b, k, sizes[k])
			}
		}
		if tune.taper < 0 {
			continue
		}
		if atEnd { // read them from the exposed end
			for i, j := 0, len(sizes)-1; i < j; i, j = i+1, j-1 {
				sizes[i], sizes[j] = sizes[j], sizes[i]
			}
		}
		if sizes[0] != min(tune.taper, n) {
			t.Fatalf("chunkBounds(%d, %v) with %+v = %v: exposed chunk %d, want %d", n, atEnd, tune, b, sizes[0], min(tune.taper, n))
		}
		if len(sizes) > 2 && sizes[1] != sizes[0] {
			t.Fatalf("chunkBounds(%d, %v) with %+v = %v: the two exposed chunks differ", n, atEnd, tune, b)
		}
		for k := 1; k < len(sizes)-1; k++ {
			if sizes[k] < sizes[k-1] || sizes[k] > 2*sizes[k-1] {
				t.Fatalf("chunkBounds(%d, %v) with %+v = %v: chunk sizes do not grow by at most doubling towards the far end", n, atEnd, tune, b)
			}
		}
	}
}
