package core

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestEvictLaterHoldsOnlyWrittenBlocks: an eviction job keeps only the
// blocks holding the region it evicts; the others (a packed readback's
// table) are back in the pool at once, and the held ones once it ends.
func TestEvictLaterHoldsOnlyWrittenBlocks(t *testing.T) {
	p := newHostPool(nil, 1<<30, nil)
	data, tab := make([]byte, 1<<20), make([]byte, 4<<10)
	for _, b := range [][]byte{data, tab} {
		p.cache.pop(bitsIndex(len(b)), len(b)) // a miss lets puts of that size be cached
	}
	gate := make(chan struct{})
	old := evictHook
	evictHook = func([]byte) { <-gate }
	defer func() { evictHook = old }()
	p.evictLater([]pinnedBlock{{buf: tab}, {buf: data}}, [][]byte{data[:300<<10]}, 4, -1)
	assert.Equal(t, uint64(len(tab)), p.cache.cached.Load(), "cached while the eviction runs")
	close(gate)
	p.settleEvictions()
	assert.Equal(t, uint64(len(tab)+len(data)), p.cache.cached.Load(), "cached once it ended")
	assert.Empty(t, p.evicting)
}
