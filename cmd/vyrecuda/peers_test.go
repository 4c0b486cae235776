package main

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// threeGPUs is what listDevices reports in the peer-matrix tests.
var threeGPUs = []core.DeviceSummary{
	{Ordinal: 0, Name: "NVIDIA H100", TotalMemory: 80 << 30, CCMajor: 9, DriverVersion: 13000},
	{Ordinal: 1, Name: "NVIDIA H100", TotalMemory: 80 << 30, CCMajor: 9, DriverVersion: 13000},
	{Ordinal: 2, Name: "NVIDIA H100", TotalMemory: 80 << 30, CCMajor: 9, DriverVersion: 13000},
}

// TestInfoPeerMatrix: info prints the links a simulated machine of three
// devices reports, row to column, with the legend.
func TestInfoPeerMatrix(t *testing.T) {
	m, err := sim.NewMachine(sim.MachineConfig{
		Devices:             3,
		Peer:                [][]bool{{true, true, false}, {true, true, true}, {false, true, true}},
		PeerNativeAtomics:   [][]bool{{false, true, false}, {false, false, true}, {false, true, false}},
		PeerPerformanceRank: [][]int{{0, 0, 2}, {1, 0, 0}, {2, 0, 0}},
	})
	require.NoError(t, err)
	asked := 0
	stub(t, &listDevices, func() ([]core.DeviceSummary, error) { return threeGPUs, nil })
	stub(t, &openDrivers, func(n int) ([]core.Driver, error) { asked = n; return m.Drivers(), nil })
	code, stdout, stderr := runCmd("info")
	require.Equal(t, exitOK, code, stderr)
	assert.Equal(t, 3, asked, "one driver per listed device")
	assert.Contains(t, stdout, "peer links (row device to column device's memory):\n"+
		"       [0]              [1]              [2]\n"+
		"  [0]  self             yes +atomics r0  no\n"+
		"  [1]  yes r1           self             yes +atomics r0\n"+
		"  [2]  no               yes +atomics r0  self\n"+
		peerLegend)
	for i := 0; i < 3; i++ {
		assert.Equal(t, uint64(2), m.Device(i).Calls(sim.OpPeerAttributes), "device %d is asked about each other device once", i)
	}
}

// TestInfoPeerMatrixFailures: a device that cannot be opened, a failing
// query or a driver without peer attributes leaves info successful, with
// the reason in place of the matrix; one device prints no matrix.
func TestInfoPeerMatrixFailures(t *testing.T) {
	m, err := sim.NewMachine(sim.MachineConfig{Devices: 3})
	require.NoError(t, err)
	cases := map[string]struct {
		devs []core.DeviceSummary
		open func(int) ([]core.Driver, error)
		want string
	}{
		"open fails": {threeGPUs, func(int) ([]core.Driver, error) { return nil, errors.New("device 2 is busy") },
			"peer links: unavailable: device 2 is busy\n"},
		"query fails": {threeGPUs, func(int) ([]core.Driver, error) {
			m.Device(1).FailNth(sim.OpPeerAttributes, 1, 999)
			return m.Drivers(), nil
		}, "peer links: unavailable: device 1 to 0: "},
		"no reporter": {threeGPUs, func(int) ([]core.Driver, error) {
			return []core.Driver{m.Device(0), struct{ core.Driver }{m.Device(1)}, m.Device(2)}, nil
		}, "peer links: unavailable: the driver of device 1 (struct { driver.Driver }) does not report peer links\n"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			stub(t, &listDevices, func() ([]core.DeviceSummary, error) { return c.devs, nil })
			stub(t, &openDrivers, c.open)
			code, stdout, stderr := runCmd("info")
			require.Equal(t, exitOK, code, stderr)
			assert.Contains(t, stdout, c.want)
			assert.NotContains(t, stdout, "self")
		})
	}
	t.Run("one device", func(t *testing.T) {
		stub(t, &listDevices, func() ([]core.DeviceSummary, error) { return threeGPUs[:1], nil })
		stub(t, &openDrivers, func(int) ([]core.Driver, error) { t.Error("one device has no peers to ask about"); return nil, nil })
		code, stdout, _ := runCmd("info")
		require.Equal(t, exitOK, code)
		assert.NotContains(t, stdout, "peer links")
	})
}
