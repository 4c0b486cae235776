package sim

import (
	"testing"
)

// BenchmarkUpload1024x4KiB measures the simulator's own cost for the W1
// shape: 1024 queued 4 KiB copies into 1024 allocations and one sync.
func BenchmarkUpload1024x4KiB(b *testing.B) {
	d := New(Config{TotalMemory: 64 << 20})
	s, _ := d.StreamCreate()
	stage, _ := d.HostAlloc(1024 * 4096)
	ptrs := make([]uint64, 1024)
	for i := range ptrs {
		ptrs[i], _ = d.MemAlloc(4096)
	}
	b.SetBytes(1024 * 4096)
	b.ResetTimer()
	for range b.N {
		for i, p := range ptrs {
			if err := d.MemcpyHtoDAsync(p, stage[i*4096:(i+1)*4096], s); err != nil {
				b.Fatal(err)
			}
		}
		if err := d.StreamSynchronize(s); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAllocFree measures one MemAlloc and MemFree pair with 1024 other
// allocations live.
func BenchmarkAllocFree(b *testing.B) {
	d := New(Config{})
	for range 1024 {
		_, _ = d.MemAlloc(64)
	}
	b.ResetTimer()
	for range b.N {
		p, err := d.MemAlloc(4096)
		if err != nil {
			b.Fatal(err)
		}
		if err := d.MemFree(p); err != nil {
			b.Fatal(err)
		}
	}
}
