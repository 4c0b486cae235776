package ntcopy

import (
	"bytes"
	"math/rand"
	"testing"
)

// Every length and both alignments around the non-temporal body's edges
// copy exactly the bytes asked for and nothing past them, as the built-in
// copy does.
func TestCopyMatchesBuiltinCopy(t *testing.T) {
	for _, f := range []struct {
		name string
		copy func(dst, src []byte) int
	}{{"Copy", Copy}, {"builtin", func(d, s []byte) int { return copy(d, s) }}} {
		t.Run(f.name, func(t *testing.T) { checkCopy(t, f.copy) })
	}
}

func checkCopy(t *testing.T, cp func(dst, src []byte) int) {
	r := rand.New(rand.NewSource(1))
	src := make([]byte, 9000)
	r.Read(src)
	for _, n := range []int{0, 1, 15, 63, 64, MinBytes - 1, MinBytes, MinBytes + 1, 1000, 4096, 4097, 8191} {
		for dOff := range 18 {
			for _, sOff := range []int{0, 1, 7, 16} {
				dst := bytes.Repeat([]byte{0xAB}, n+dOff+32)
				got := cp(dst[dOff:dOff+n], src[sOff:sOff+n])
				Fence()
				if got != n {
					t.Fatalf("n %d: copied %d", n, got)
				}
				if !bytes.Equal(dst[dOff:dOff+n], src[sOff:sOff+n]) {
					t.Fatalf("n %d dst+%d src+%d: bytes differ", n, dOff, sOff)
				}
				for i, b := range dst {
					if (i < dOff || i >= dOff+n) && b != 0xAB {
						t.Fatalf("n %d dst+%d src+%d: byte %d outside the copy changed", n, dOff, sOff, i)
					}
				}
			}
		}
	}
}

// Copy stops at the shorter slice, as copy does.
func TestCopyStopsAtTheShorterSlice(t *testing.T) {
	for _, cp := range []func(dst, src []byte) int{Copy} {
		src := bytes.Repeat([]byte{1}, 5000)
		dst := make([]byte, 3000)
		if n := cp(dst, src); n != 3000 || !bytes.Equal(dst, src[:3000]) {
			t.Fatalf("copied %d", n)
		}
		dst = make([]byte, 5000)
		if n := cp(dst, src[:700]); n != 700 || !bytes.Equal(dst[:700], src[:700]) || dst[700] != 0 {
			t.Fatalf("copied %d", n)
		}
	}
}

func BenchmarkCopy4KiBPieces(b *testing.B) {
	const pieces, size = 1024, 4096
	src := make([][]byte, pieces)
	for i := range src {
		src[i] = make([]byte, size)
	}
	dst := make([]byte, pieces*size)
	for _, nt := range []bool{false, true} {
		name := "builtin"
		if nt {
			name = "nontemporal"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(pieces * size)
			for range b.N {
				for i, s := range src {
					if nt {
						Copy(dst[i*size:], s)
					} else {
						copy(dst[i*size:], s)
					}
				}
				Fence()
			}
		})
	}
}
