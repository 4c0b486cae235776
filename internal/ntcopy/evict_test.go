package ntcopy

import (
	"bytes"
	"math/rand"
	"runtime"
	"testing"
)

// Evicting any span, at every alignment around a cache line and lengths
// that end inside, on and past line boundaries, changes no byte inside or
// around it (the guard bytes share the span's first and last lines).
func TestEvictChangesNoByte(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	buf := make([]byte, 3*4096)
	r.Read(buf)
	want := bytes.Clone(buf)
	for _, n := range []int{0, 1, 2, 63, 64, 65, 127, 128, 129, 1000, 4095, 4096, 4097, 8000} {
		for off := range 70 {
			Evict(buf[off : off+n])
			if !bytes.Equal(buf, want) {
				t.Fatalf("n %d off %d: Evict changed bytes", n, off)
			}
		}
	}
}

// Bytes written just before Evict, by plain and by non-temporal stores,
// read back afterwards: a flushed modified line is written back, not lost.
func TestEvictKeepsFreshWrites(t *testing.T) {
	src := make([]byte, 5000)
	rand.New(rand.NewSource(3)).Read(src)
	for _, nt := range []bool{false, true} {
		dst := bytes.Repeat([]byte{0xCD}, 5200)
		if nt {
			Copy(dst[37:37+len(src)], src)
			Fence()
		} else {
			copy(dst[37:], src)
		}
		Evict(dst[37 : 37+len(src)])
		if !bytes.Equal(dst[37:37+len(src)], src) {
			t.Fatalf("nt %v: bytes lost", nt)
		}
		for i, b := range dst {
			if (i < 37 || i >= 37+len(src)) && b != 0xCD {
				t.Fatalf("nt %v: guard byte %d changed", nt, i)
			}
		}
	}
}

// Every amd64 processor flushes lines (CLFLUSH is part of SSE2); other
// architectures evict nothing.
func TestEvictAvailable(t *testing.T) {
	if got, want := EvictAvailable(), runtime.GOARCH == "amd64"; got != want {
		t.Fatalf("EvictAvailable() = %v on %s", got, runtime.GOARCH)
	}
}

// The cost of evicting a 4 MiB staging block after reading it.
func BenchmarkEvict4MiB(b *testing.B) {
	buf := make([]byte, 4<<20)
	b.SetBytes(int64(len(buf)))
	sum := 0
	for range b.N {
		for i := 0; i < len(buf); i += LineBytes {
			sum += int(buf[i])
		}
		Evict(buf)
	}
	_ = sum
}
