package collective_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/driver"
	"github.com/vyre-go/vyrecuda/core/internal/collective"
	"github.com/vyre-go/vyrecuda/core/internal/errs"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

func TestOfRefusesDriversWithoutCollectives(t *testing.T) {
	dev := sim.New(sim.Config{})
	cd, err := collective.Of("NewCommID", dev, "fix it")
	require.NoError(t, err)
	assert.Equal(t, driver.CollectiveDriver(dev), cd)

	_, err = collective.Of("NewCommID", struct{ driver.Driver }{dev}, "open it over NCCL")
	require.ErrorIs(t, err, errs.ErrUnsupported)
	assert.Contains(t, err.Error(), "has no collectives")
	assert.Contains(t, err.Error(), "Fix: open it over NCCL")
}

func TestBuildMakesOneCommunicatorPerDriver(t *testing.T) {
	m, err := sim.NewMachine(sim.MachineConfig{Devices: 3})
	require.NoError(t, err)
	comms, err := collective.Build("Group.AllReduce", m.Device(0), m.Drivers())
	require.NoError(t, err)
	require.Len(t, comms, 3)
	for i, c := range comms {
		assert.Equal(t, i, c.Rank())
		assert.Equal(t, 3, c.Size())
		require.NoError(t, c.Destroy())
	}

	m.Device(0).FailNth(sim.OpNewCommunicators, 1, cudaapi.CUDA_ERROR_OUT_OF_MEMORY)
	comms, err = collective.Build("Group.AllReduce", m.Device(0), m.Drivers())
	require.Nil(t, comms)
	require.ErrorIs(t, err, errs.ErrDriver)
	require.ErrorIs(t, err, cudaapi.CUDA_ERROR_OUT_OF_MEMORY)
	assert.Contains(t, err.Error(), "NewCommunicators failed")
	sim.RequireMachineNoLeaks(t, m)
}

// shortDriver returns a communicator fewer than asked for, with a nil in
// place of another one; it keeps the two it withheld.
type shortDriver struct {
	driver.CollectiveDriver
	lost *[]driver.Communicator
}

func (s shortDriver) NewCommunicators(drivers []driver.Driver) ([]driver.Communicator, error) {
	comms, err := s.CollectiveDriver.NewCommunicators(drivers)
	if err != nil {
		return nil, err
	}
	*s.lost = comms[1:]
	return []driver.Communicator{comms[0], nil}, nil
}

func TestBuildDestroysWhatAMisbehavingDriverReturned(t *testing.T) {
	m, err := sim.NewMachine(sim.MachineConfig{Devices: 3})
	require.NoError(t, err)
	var lost []driver.Communicator
	comms, err := collective.Build("Group.AllReduce", shortDriver{m.Device(0), &lost}, m.Drivers())
	require.Nil(t, comms)
	require.ErrorIs(t, err, errs.ErrDriver)
	assert.Contains(t, err.Error(), "NewCommunicators returned success with a null result")
	assert.Zero(t, m.Device(0).Live().Communicators, "the communicator returned was destroyed")
	assert.Equal(t, 1, m.Device(1).Live().Communicators)
	for _, c := range lost {
		require.NoError(t, c.Destroy())
	}
	sim.RequireMachineNoLeaks(t, m)
}
