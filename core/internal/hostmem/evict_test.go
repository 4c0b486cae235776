package hostmem

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestEvictLaterHoldsOnlyWrittenBlocks: an eviction job keeps only the
// blocks holding the region it evicts; the others (a packed readback's
// table) are back in the pool at once, and the held ones once it ends.
func TestEvictLaterHoldsOnlyWrittenBlocks(t *testing.T) {
	gate := make(chan struct{})
	p := New(nil, Config{Cap: 1 << 30, Helpers: goHelpers{}, EvictHook: func([]byte) { <-gate }})
	data, tab := make([]byte, 1<<20), make([]byte, 4<<10)
	for _, b := range [][]byte{data, tab} {
		p.cache.pop(bitsIndex(len(b)), len(b)) // a miss lets returns of that size be cached
	}
	p.EvictLater([]Block{{buf: tab}, {buf: data}}, [][]byte{data[:300<<10]}, 4, -1)
	assert.Equal(t, uint64(len(tab)), p.cache.cached.Load(), "cached while the eviction runs")
	close(gate)
	p.settleEvictions()
	assert.Equal(t, uint64(len(tab)+len(data)), p.cache.cached.Load(), "cached once it ended")
	assert.Empty(t, p.evicting)
}

// TestEvictLaterWithoutHelpersGivesBlocksBackAtOnce: a pool without
// Helpers evicts nothing after the call; the blocks are cached at once.
func TestEvictLaterWithoutHelpersGivesBlocksBackAtOnce(t *testing.T) {
	evicted := 0
	p := New(nil, Config{Cap: 1 << 30, EvictHook: func([]byte) { evicted++ }})
	data := make([]byte, 64<<10)
	p.cache.pop(bitsIndex(len(data)), len(data))
	p.EvictLater([]Block{{buf: data}}, [][]byte{data}, 4, -1)
	assert.Equal(t, uint64(len(data)), p.cache.cached.Load())
	assert.Zero(t, evicted)
	assert.Empty(t, p.evicting)
}
