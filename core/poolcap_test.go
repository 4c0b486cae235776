package core_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// A zero cap caches nothing: each free goes to the driver and each
// allocation comes from it, for resident buffers and pinned staging alike.
func TestZeroPoolCapsCacheNothing(t *testing.T) {
	b, dev := openSim(t, sim.Config{}, core.WithDevicePoolCap(0), core.WithPinnedPoolCap(0))
	for range 3 {
		h, err := b.Alloc(4 << 10)
		require.NoError(t, err)
		require.NoError(t, b.Upload(core.UploadAt{Buf: h, Data: make([]byte, 4<<10)}))
		require.NoError(t, b.Free(h))
		dc, hc := b.MemoryStats().CachedDevice, b.MemoryStats().CachedPinned
		assert.Zero(t, dc, "device pool with cap 0 cached bytes")
		assert.Zero(t, hc, "pinned pool with cap 0 cached bytes")
	}
	assert.Equal(t, dev.Calls(sim.OpMemAlloc), dev.Calls(sim.OpMemFree), "every allocation was freed at once")
	assert.Equal(t, dev.Calls(sim.OpHostAlloc), dev.Calls(sim.OpHostFree), "every staging block was freed at once")
	assert.GreaterOrEqual(t, dev.Calls(sim.OpMemAlloc), uint64(3))

	// The default caps do cache: the same loop allocates once.
	b2, dev2 := openSim(t, sim.Config{})
	for range 3 {
		h, err := b2.Alloc(4 << 10)
		require.NoError(t, err)
		require.NoError(t, b2.Free(h))
	}
	assert.Equal(t, uint64(1), dev2.Calls(sim.OpMemAlloc))
	dc := b2.MemoryStats().CachedDevice
	assert.Equal(t, uint64(4<<10), dc)
}
