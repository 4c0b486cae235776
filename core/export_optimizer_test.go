package core

import "sort"

// Test hooks for the optimizer dispatcher's external tests.

// SetOptimizerPooledBytesForTest corrupts the free pool's byte count, to
// prove the accounting is checked rather than saturating.
func SetOptimizerPooledBytesForTest(d *OptimizerDispatcher, v uint64) {
	d.mu.Lock()
	d.pooledBytes = v
	d.mu.Unlock()
}

// OptimizerPooledLensForTest lists the lengths of the pooled buffers,
// ascending, one entry per buffer.
func OptimizerPooledLensForTest(d *OptimizerDispatcher) []int {
	d.mu.Lock()
	defer d.mu.Unlock()
	var lens []int
	for n, list := range d.pool {
		for range list {
			lens = append(lens, n)
		}
	}
	sort.Ints(lens)
	return lens
}

// OptimizerPoolListBytesForTest sums the pooled buffers' lengths from the
// free lists themselves, for comparison with the tracked count.
func OptimizerPoolListBytesForTest(d *OptimizerDispatcher) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.poolListBytes()
}

// StaticCacheKeyForTest exposes the static cache's key derivation.
func StaticCacheKeyForTest(domain, feature uint64, payloads [][]byte) [32]byte {
	return staticCacheKey(domain, feature, payloads)
}
