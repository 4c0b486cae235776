package fusion

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// Two shapes per size: "disjoint" is one 4 KiB copy per buffer in handle
// order (batched uploads into many buffers), "overlapping" is shuffled
// 256-byte copies into few buffers at offsets that often overlap or touch,
// which exercises the sort and the merge buffer.
func benchUploads(n int, overlapping bool) []UploadCopy {
	rng := rand.New(rand.NewPCG(1, uint64(n)))
	payload := make([]byte, 4096)
	copies := make([]UploadCopy, n)
	for i := range copies {
		if overlapping {
			copies[i] = UploadCopy{Handle: uint64(rng.IntN(max(n/8, 1))) + 1, Dst: uint64(rng.IntN(16)) * 128, Data: payload[:256]}
		} else {
			copies[i] = UploadCopy{Handle: uint64(i) + 1, Dst: 0, Data: payload}
		}
	}
	if overlapping {
		rng.Shuffle(n, func(i, j int) { copies[i], copies[j] = copies[j], copies[i] })
	}
	return copies
}

func benchReadbacks(n int, overlapping bool) []ReadbackCopy {
	rng := rand.New(rand.NewPCG(2, uint64(n)))
	reqs := make([]ReadbackCopy, n)
	for i := range reqs {
		if overlapping {
			reqs[i] = ReadbackCopy{Handle: uint64(rng.IntN(max(n/8, 1))) + 1, Src: uint64(rng.IntN(16)) * 128, Len: 256}
		} else {
			reqs[i] = ReadbackCopy{Handle: uint64(i) + 1, Src: 0, Len: 4096}
		}
	}
	return reqs
}

func BenchmarkFuseUploads(b *testing.B) {
	for _, n := range []int{8, 64, 1024} {
		for _, overlapping := range []bool{false, true} {
			copies := benchUploads(n, overlapping)
			b.Run(fmt.Sprintf("n=%d/%s", n, shape(overlapping)), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, _, err := FuseUploads(copies); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkFuseReadbacks(b *testing.B) {
	for _, n := range []int{8, 64, 1024} {
		for _, overlapping := range []bool{false, true} {
			reqs := benchReadbacks(n, overlapping)
			b.Run(fmt.Sprintf("n=%d/%s", n, shape(overlapping)), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := FuseReadbacks(reqs); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func shape(overlapping bool) string {
	if overlapping {
		return "overlapping"
	}
	return "disjoint"
}
