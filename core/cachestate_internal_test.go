package core

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/vyre-go/vyrecuda/core/internal/transfer"
)

// WithStagingCache reaches the tuning every call starts from.
func TestWithStagingCacheSetsTheTuning(t *testing.T) {
	var c config
	WithStagingCache(StagingCache{CachedUploadStores: true, Evict: EvictAlways})(&c)
	assert.True(t, c.xfer.PlainStage)
	assert.True(t, c.xfer.PlainPack)
	assert.Equal(t, transfer.EvictAlways, c.xfer.Evict)
	var d config
	WithStagingCache(StagingCache{})(&d)
	assert.False(t, d.xfer.PlainStage || d.xfer.PlainPack)
	assert.Equal(t, transfer.EvictBySize, d.xfer.Evict)
}

// Every ReadbackEvict reaches the tuning as the policy of its name; a value
// that is none of them evicts by size, as EvictBySize does.
func TestReadbackEvictBecomesItsPolicy(t *testing.T) {
	for e, want := range map[ReadbackEvict]transfer.EvictPolicy{
		EvictBySize: transfer.EvictBySize, EvictNever: transfer.EvictNever, EvictAlways: transfer.EvictAlways, 7: transfer.EvictBySize,
	} {
		var c config
		WithStagingCache(StagingCache{Evict: e})(&c)
		assert.Equal(t, want, c.xfer.Evict, "ReadbackEvict %d", e)
	}
}
