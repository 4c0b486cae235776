package core_test

import (
	"testing"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// benchPoolHit measures Alloc+Free of one size after the
// first round trip has put a buffer of that size in the pool, so every
// iteration is a pool hit: no driver call (W4; target <= 0.5 us, PyTorch's
// caching allocator 5.2 us).
func benchPoolHit(b *testing.B, d *core.OptimizerDispatcher, n int) {
	b.Helper()
	id, err := d.Alloc(n)
	if err != nil {
		b.Fatal(err)
	}
	if err := d.Free(id); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		id, err := d.Alloc(n)
		if err != nil {
			b.Fatal(err)
		}
		if err := d.Free(id); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkOptimizerPoolHit(b *testing.B) {
	be, dev := openSim(b, sim.Config{})
	d, err := core.NewOptimizerDispatcher(be)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := d.Close(); err != nil {
			b.Errorf("dispatcher Close: %v", err)
		}
	})
	allocs := dev.Calls(sim.OpMemAlloc)
	benchPoolHit(b, d, 4096)
	b.StopTimer()
	if got := dev.Calls(sim.OpMemAlloc) - allocs; got > 1 {
		b.Fatalf("%d driver allocations; every iteration after the first must hit the pool", got)
	}
}

// BenchmarkOptimizerPoolHitParallel is the same round trip from GOMAXPROCS
// goroutines at once, each with its own size, contending for the one lock.
func BenchmarkOptimizerPoolHitParallel(b *testing.B) {
	be, _ := openSim(b, sim.Config{})
	d, err := core.NewOptimizerDispatcher(be)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := d.Close(); err != nil {
			b.Errorf("dispatcher Close: %v", err)
		}
	})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id, err := d.Alloc(4096)
			if err != nil {
				b.Error(err)
				return
			}
			if err := d.Free(id); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
