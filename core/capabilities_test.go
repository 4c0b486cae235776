package core_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

func TestBackendCapabilitiesFromDriver(t *testing.T) {
	b, _ := openSim(t, sim.Config{TotalMemory: testMemory})
	assert.Equal(t, sim.DefaultCapabilities(), b.Capabilities())
	assert.True(t, b.Capabilities().Graphs)

	noGraphs := sim.DefaultCapabilities()
	noGraphs.Graphs, noGraphs.ConditionalGraphNodes, noGraphs.DriverVersion = false, false, 11020
	noGraphs.ProgrammaticLaunch = false
	b2, _ := openSim(t, sim.Config{TotalMemory: testMemory, Capabilities: &noGraphs})
	got := b2.Capabilities()
	assert.False(t, got.Graphs)
	assert.False(t, got.ConditionalGraphNodes)
	assert.True(t, got.MemoryPools, "the other features stay")
	assert.Equal(t, 11020, got.DriverVersion)
	assert.Equal(t, "CUDA 11.2: batched copies, stream-ordered memory pools, virtual memory management, peer access, mapped pinned host memory", got.String())
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
	assert.Len(t, list, 8)
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

// TestCaptureDegradesWithoutGraphs: a driver that reports no graphs refuses
// Capture up front, touching nothing, while Run keeps working.
func TestCaptureDegradesWithoutGraphs(t *testing.T) {
	caps := sim.DefaultCapabilities()
	caps.Graphs = false
	b, dev := openSim(t, sim.Config{TotalMemory: testMemory, Capabilities: &caps})
	gb := newGraphBatch(t, b)
	_, err := b.Capture(gb.batch)
	require.ErrorIs(t, err, core.ErrUnsupported)
	assert.Contains(t, err.Error(), "does not offer graphs")
	assert.Equal(t, 1, strings.Count(err.Error(), "Fix:"))
	assert.Zero(t, dev.Calls(sim.OpStreamBeginCapture), "nothing captured")
	_, err = b.Run(gb.batch, nil)
	require.NoError(t, err, "the core path does not need graphs")
	gb.free(t, b)
}
