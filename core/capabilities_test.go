package core_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// plainDriver hides every optional capability of the driver it wraps.
type plainDriver struct{ core.Driver }

func TestBackendCapabilitiesFromDriver(t *testing.T) {
	b, _ := openSim(t, sim.Config{TotalMemory: testMemory})
	assert.Equal(t, sim.DefaultCapabilities(), b.Capabilities())
	assert.True(t, b.Capabilities().Graphs)

	noGraphs := sim.DefaultCapabilities()
	noGraphs.Graphs, noGraphs.ConditionalGraphNodes, noGraphs.DriverVersion = false, false, 11020
	b2, _ := openSim(t, sim.Config{TotalMemory: testMemory, Capabilities: &noGraphs})
	got := b2.Capabilities()
	assert.False(t, got.Graphs)
	assert.False(t, got.ConditionalGraphNodes)
	assert.True(t, got.MemoryPools, "the other features stay")
	assert.Equal(t, 11020, got.DriverVersion)
	assert.Equal(t, "CUDA 11.2: batched copies, stream-ordered memory pools, virtual memory management, peer access", got.String())
}

func TestBackendCapabilitiesWithoutReporter(t *testing.T) {
	dev := sim.New(sim.Config{TotalMemory: testMemory})
	b, err := core.Open(plainDriver{dev})
	if !assert.NoError(t, err) {
		return
	}
	assert.Equal(t, core.Capabilities{}, b.Capabilities(), "a driver that cannot say offers nothing optional")
	assert.NoError(t, b.Close())
	sim.RequireNoLeaks(t, dev)

	var nilBackend *core.Backend
	assert.Equal(t, core.Capabilities{}, nilBackend.Capabilities())
	var nilDev *sim.Device
	assert.Equal(t, core.Capabilities{}, nilDev.Capabilities())
}

func TestCapabilitiesList(t *testing.T) {
	var none core.Capabilities
	assert.Equal(t, "unknown driver: no optional features", none.String())
	list := sim.DefaultCapabilities().List()
	assert.Len(t, list, 6)
	for _, f := range list {
		assert.True(t, f.Offered, f.Name)
	}
	c := core.Capabilities{DriverVersion: 12040, PeerAccess: true}
	var offered []string
	for _, f := range c.List() {
		if f.Offered {
			offered = append(offered, f.Name)
		}
	}
	assert.Equal(t, []string{"peer access"}, offered)
}
