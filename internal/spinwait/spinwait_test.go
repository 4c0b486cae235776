package spinwait

import (
	"testing"
	"time"
)

// Pause returns, and a loop of pauses takes time (the hint is executed, not
// compiled away), without taking long.
func TestPauseReturns(t *testing.T) {
	start := time.Now()
	for range 100000 {
		Pause()
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("100000 pauses took %v", d)
	}
}

func BenchmarkPause(b *testing.B) {
	for range b.N {
		Pause()
	}
}
