package sim

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// TestPeerAttributesFollowTheConfig: each ordered pair reports the access of
// Peer, the atomics of PeerNativeAtomics and the rank of
// PeerPerformanceRank; a device is not its own peer, nor is a device of
// another Machine.
func TestPeerAttributesFollowTheConfig(t *testing.T) {
	m, err := NewMachine(MachineConfig{
		Devices:             3,
		Peer:                [][]bool{{true, true, false}, {true, true, true}, {false, true, true}},
		PeerNativeAtomics:   [][]bool{{false, true, false}, {false, false, true}, {false, true, false}},
		PeerPerformanceRank: [][]int{{0, 0, 2}, {1, 0, 0}, {2, 0, 0}},
	})
	require.NoError(t, err)
	want := map[[2]int]driver.PeerAttributes{
		{0, 1}: {Access: true, NativeAtomics: true},
		{0, 2}: {PerformanceRank: 2},
		{1, 0}: {Access: true, PerformanceRank: 1},
		{1, 2}: {Access: true, NativeAtomics: true},
		{2, 0}: {PerformanceRank: 2},
		{2, 1}: {Access: true, NativeAtomics: true},
	}
	for pair, w := range want {
		got, err := m.Device(pair[0]).PeerAttributes(m.Device(pair[1]))
		require.NoError(t, err, "%v", pair)
		assert.Equal(t, w, got, "%d -> %d", pair[0], pair[1])
	}
	got, err := m.Device(1).PeerAttributes(m.Device(1))
	assert.ErrorIs(t, err, cudaapi.CUDA_ERROR_INVALID_DEVICE)
	assert.Zero(t, got)
	_, err = m.Device(0).PeerAttributes(New(Config{}))
	assert.ErrorIs(t, err, cudaapi.CUDA_ERROR_INVALID_DEVICE)
	_, err = m.Device(0).PeerAttributes(nil)
	assert.ErrorIs(t, err, cudaapi.CUDA_ERROR_INVALID_DEVICE)
	assert.Equal(t, uint64(9), m.Device(0).Calls(OpPeerAttributes)+m.Device(1).Calls(OpPeerAttributes)+m.Device(2).Calls(OpPeerAttributes))
}

// TestPeerAttributesDefaults: without the matrices every pair with access
// has native atomics at rank 0, and a pair without access has neither.
func TestPeerAttributesDefaults(t *testing.T) {
	m, err := NewMachine(MachineConfig{Devices: 2, Peer: [][]bool{{true, false}, {true, true}}})
	require.NoError(t, err)
	a, err := m.Device(1).PeerAttributes(m.Device(0))
	require.NoError(t, err)
	assert.Equal(t, driver.PeerAttributes{Access: true, NativeAtomics: true}, a)
	a, err = m.Device(0).PeerAttributes(m.Device(1))
	require.NoError(t, err)
	assert.Equal(t, driver.PeerAttributes{}, a)
}

// TestNewMachineRefusesBadPeerMatrices: a matrix of the wrong shape, atomics
// without access and a negative rank are refused with the reason.
func TestNewMachineRefusesBadPeerMatrices(t *testing.T) {
	cases := map[string]struct {
		cfg  MachineConfig
		want string
	}{
		"atomics rows":   {MachineConfig{Devices: 2, PeerNativeAtomics: [][]bool{{true, true}}}, "PeerNativeAtomics has 1 rows for 2 devices"},
		"rank row":       {MachineConfig{Devices: 2, PeerPerformanceRank: [][]int{{0, 0}, {0}}}, "PeerPerformanceRank row 1 has 1 entries"},
		"peer rows":      {MachineConfig{Devices: 2, Peer: [][]bool{{true, true}}}, "Peer has 1 rows for 2 devices"},
		"atomics no way": {MachineConfig{Devices: 2, Peer: [][]bool{{true, false}, {true, true}}, PeerNativeAtomics: [][]bool{{false, true}, {true, false}}}, "PeerNativeAtomics[0][1] is true but Peer gives device 0 no access"},
		"negative rank":  {MachineConfig{Devices: 2, PeerPerformanceRank: [][]int{{0, -1}, {0, 0}}}, "PeerPerformanceRank[0][1] is -1"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			m, err := NewMachine(c.cfg)
			assert.Nil(t, m)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}
