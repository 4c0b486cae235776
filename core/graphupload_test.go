package core_test

import (
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

func TestGraphCaptureUploadsOnce(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	gb := newGraphBatch(t, b)
	g, err := b.Capture(gb.batch)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), dev.Calls(sim.OpGraphUpload), "Capture uploads the executable graph")
	assert.Equal(t, uint64(1), dev.Calls(sim.OpLaunchProgrammatic), "the second step follows the first")
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 3; i++ {
		gb.fill(r)
		_, err := g.Replay(nil)
		require.NoError(t, err)
	}
	assert.Equal(t, uint64(1), dev.Calls(sim.OpGraphUpload), "replays do not upload again")
	require.NoError(t, g.Close())
	gb.free(t, b)
}

func TestGraphCaptureUploadFailure(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	gb := newGraphBatch(t, b)
	dev.FailNth(sim.OpGraphUpload, 1, cudaapi.CUDA_ERROR_OUT_OF_MEMORY)
	g, err := b.Capture(gb.batch)
	require.ErrorIs(t, err, core.ErrDriver)
	require.ErrorIs(t, err, cudaapi.CUDA_ERROR_OUT_OF_MEMORY)
	assert.Contains(t, err.Error(), "GraphUpload")
	assert.Nil(t, g)
	live := dev.Live()
	assert.Zero(t, live.Graphs, "the recorded graph was destroyed")
	assert.Zero(t, live.GraphExecs, "the executable graph was destroyed")
	gb.free(t, b) // nothing stays in flight
	require.NoError(t, b.Close(), "no Graph stays open")
}

// noUploader hides GraphUpload: every other capability of the device stays.
type noUploader struct {
	core.Driver
	core.GraphDriver
	core.BatchLauncher
	core.CapabilityReporter
	core.HostKernelBinder
}

func TestGraphCaptureWithoutUploader(t *testing.T) {
	dev := sim.New(sim.Config{TotalMemory: testMemory})
	b, err := core.Open(noUploader{dev, dev, dev, dev, dev}, core.WithLogger(quietLogger))
	require.NoError(t, err)
	gb := newGraphBatch(t, b)
	g, err := b.Capture(gb.batch)
	require.NoError(t, err)
	assert.Zero(t, dev.Calls(sim.OpGraphUpload))
	_, err = g.Replay(nil)
	require.NoError(t, err)
	require.NoError(t, g.Close())
	gb.free(t, b)
	require.NoError(t, b.Close())
	sim.RequireNoLeaks(t, dev)
}
