package core

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The default evicts readback staging from 1 MiB to 64 MiB inclusive, and
// the two forced policies hold at every size, zero included.
func TestReadbackEvictPolicy(t *testing.T) {
	sizes := []uint64{0, 1, 64 << 10, 256 << 10, 1<<20 - 1, 1 << 20, 4 << 20, 64 << 20, 64<<20 + 1, 256 << 20}
	want := []bool{false, false, false, false, false, true, true, true, false, false}
	for i, n := range sizes {
		def := transferTuning{}
		assert.Equal(t, want[i], def.evictsReadback(n), "by size, %d bytes", n)
		never, always := transferTuning{evict: EvictNever}, transferTuning{evict: EvictAlways}
		assert.False(t, never.evictsReadback(n), "never, %d bytes", n)
		assert.True(t, always.evictsReadback(n), "always, %d bytes", n)
	}
}

// WithStagingCache reaches the tuning every call starts from.
func TestWithStagingCacheSetsTheTuning(t *testing.T) {
	var c config
	WithStagingCache(StagingCache{CachedUploadStores: true, Evict: EvictAlways})(&c)
	assert.True(t, c.xfer.plainStage)
	assert.True(t, c.xfer.plainPack)
	assert.Equal(t, EvictAlways, c.xfer.evict)
	var d config
	WithStagingCache(StagingCache{})(&d)
	assert.False(t, d.xfer.plainStage || d.xfer.plainPack)
	assert.Equal(t, EvictBySize, d.xfer.evict)
}
