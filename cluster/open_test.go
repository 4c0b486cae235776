package cluster

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// stubDevices makes Open see visible devices and open simulated ones,
// recording the ordinal asked for.
func stubDevices(t *testing.T, visible int, countErr error) *int {
	asked := -1
	oldCount, oldOpen := countDevices, openCUDA
	t.Cleanup(func() { countDevices, openCUDA = oldCount, oldOpen })
	countDevices = func() (int, error) { return visible, countErr }
	openCUDA = func(ordinal int, opts ...core.Option) (*core.Backend, error) {
		asked = ordinal
		return core.Open(sim.New(sim.Config{Ordinal: ordinal}), opts...)
	}
	return &asked
}

// TestOpenPicksTheLocalRanksDevice: Open opens device LOCAL_RANK, or the one
// device a rank sees.
func TestOpenPicksTheLocalRanksDevice(t *testing.T) {
	for _, tt := range []struct{ local, visible, want int }{{1, 2, 1}, {3, 1, 0}} {
		asked := stubDevices(t, tt.visible, nil)
		setLauncherEnv(t, launcherEnv(Slurm, tt.local, 4, 1))
		b, e, err := Open()
		require.NoError(t, err)
		assert.Equal(t, tt.want, *asked)
		assert.Equal(t, tt.local, e.LocalRank)
		assert.Equal(t, tt.want, b.DeviceInfo().Ordinal)
		require.NoError(t, b.Close())
	}
}

func TestOpenFailures(t *testing.T) {
	asked := stubDevices(t, 2, nil)
	setLauncherEnv(t, nil)
	b, _, err := Open()
	assert.Nil(t, b)
	requireEnvError(t, "cluster.Open", err, "no launcher variables")

	setLauncherEnv(t, launcherEnv(Torchrun, 2, 4, 2))
	b, _, err = Open()
	assert.Nil(t, b)
	requireEnvError(t, "cluster.Open", err, "local rank 2, but this process sees 2 CUDA devices")
	assert.Equal(t, -1, *asked, "no device is opened")

	stubDevices(t, 0, &core.Error{Op: "cuda.Count", Kind: core.KindUnsupported, Detail: "no driver", Fix: "install one"})
	b, _, err = Open()
	assert.Nil(t, b)
	var ce *core.Error
	require.True(t, errors.As(err, &ce))
	assert.Equal(t, "cluster.Open", ce.Op)
	assert.ErrorIs(t, err, core.ErrUnsupported)
}
