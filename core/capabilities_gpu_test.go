//go:build gpu

package core_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
)

// TestGPUCapabilities opens the real driver and checks that its capabilities
// agree with Devices and cover what a CUDA 13 driver on a current GPU offers.
func TestGPUCapabilities(t *testing.T) {
	b, err := core.OpenCUDA(0)
	require.NoError(t, err)
	defer func() { assert.NoError(t, b.Close()) }()
	c := b.Capabilities()
	devs, err := core.Devices()
	require.NoError(t, err)
	assert.Equal(t, devs[0].Capabilities, c)
	assert.Equal(t, devs[0].DriverVersion, c.DriverVersion)
	t.Logf("device 0: %s", c)
	if c.DriverVersion >= 13000 {
		assert.True(t, c.Graphs)
		assert.True(t, c.MemoryPools)
		assert.True(t, c.VirtualMemory)
		assert.True(t, c.BatchedCopies)
		assert.True(t, c.ConditionalGraphNodes)
	}
	// Every 64-bit Linux process on a current GPU has unified addressing.
	assert.True(t, c.MappedPinnedHost)
	if len(devs) == 1 {
		assert.False(t, c.PeerAccess, "peer access needs another device")
	}
}
