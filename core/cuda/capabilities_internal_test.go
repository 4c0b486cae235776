package cuda

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

func TestNarrowCapabilities(t *testing.T) {
	all := cudaapi.Capabilities{DriverVersion: 13000} // every feature offered
	yes := func(cudaapi.DeviceAttribute) bool { return true }
	tests := []struct {
		name    string
		attr    func(cudaapi.DeviceAttribute) bool
		peer    bool
		pools   bool
		vmm     bool
		peerOut bool
		mapped  bool
	}{
		{"device agrees", yes, true, true, true, true, true},
		{"no other device", yes, false, true, true, false, true},
		{"no pools on this device", func(a cudaapi.DeviceAttribute) bool {
			return a != cudaapi.CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED
		}, true, false, true, true, true},
		{"no VMM on this device", func(a cudaapi.DeviceAttribute) bool {
			return a != cudaapi.CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
		}, true, true, false, true, true},
		{"no unified addressing", func(a cudaapi.DeviceAttribute) bool {
			return a != cudaapi.CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING
		}, true, true, true, true, false},
		{"host memory not mappable", func(a cudaapi.DeviceAttribute) bool {
			return a != cudaapi.CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY
		}, true, true, true, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := narrowCapabilities(all, tt.attr, func() bool { return tt.peer })
			assert.Equal(t, 13000, c.DriverVersion)
			assert.True(t, c.Graphs)
			assert.True(t, c.BatchedCopies)
			assert.True(t, c.ConditionalGraphNodes)
			assert.Equal(t, tt.pools, c.MemoryPools)
			assert.Equal(t, tt.vmm, c.VirtualMemory)
			assert.Equal(t, tt.peerOut, c.PeerAccess)
			assert.Equal(t, tt.mapped, c.MappedPinnedHost)
		})
	}
	// Without a driver version nothing is offered, and the device is not asked.
	asked := false
	c := narrowCapabilities(cudaapi.Capabilities{}, func(cudaapi.DeviceAttribute) bool { asked = true; return true },
		func() bool { asked = true; return true })
	assert.Equal(t, driver.Capabilities{}, c)
	assert.False(t, asked)
}
