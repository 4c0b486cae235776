package core_test

import (
	"bytes"
	"errors"
	"log/slog"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// lockedLog is a log destination safe for the Backend's goroutines.
type lockedLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func TestOpenDefaultFollowsVyrecudaDeviceSim(t *testing.T) {
	t.Setenv(core.DeviceEnv, "sim")
	logs := &lockedLog{}
	b, err := core.OpenDefault(core.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	require.NoError(t, err)
	assert.Equal(t, sim.DefaultName, b.DeviceInfo().Name)
	assert.Equal(t, uint64(sim.DefaultTotalMemory), b.DeviceInfo().TotalMemory)
	assert.Contains(t, logs.String(), "level=INFO")
	assert.Contains(t, logs.String(), "device=sim")
	assert.Contains(t, logs.String(), `reason="VYRECUDA_DEVICE=sim"`)

	// The Backend works and closes its simulated device.
	h, err := b.Alloc(64)
	require.NoError(t, err)
	require.NoError(t, b.Free(h))
	require.NoError(t, b.Close())
}

func TestVyrecudaDeviceValues(t *testing.T) {
	good := map[string]core.DeviceChoice{
		"sim":     {Sim: true, Env: "sim", Reason: "VYRECUDA_DEVICE=sim"},
		"cuda":    {Env: "cuda", Reason: "VYRECUDA_DEVICE=cuda"},
		"cuda:0":  {Env: "cuda:0", Reason: "VYRECUDA_DEVICE=cuda:0"},
		"cuda:12": {Ordinal: 12, Env: "cuda:12", Reason: "VYRECUDA_DEVICE=cuda:12"},
	}
	for env, want := range good {
		t.Setenv(core.DeviceEnv, env)
		got, err := core.ChooseDevice()
		require.NoError(t, err, env)
		assert.Equal(t, want, got, env)
	}
	assert.Equal(t, "cuda:12", good["cuda:12"].String())
	assert.Equal(t, "sim", good["sim"].String())

	for _, env := range []string{"gpu", "SIM", " sim", "cuda:", "cuda:-1", "cuda:x", "cuda:1:2", "cuda:+1", "cuda:01", "cuda1"} {
		t.Setenv(core.DeviceEnv, env)
		_, err := core.ChooseDevice()
		e := requireErrKind(t, err, core.ErrInvalidArgument, "VYRECUDA_DEVICE is \""+env+"\"", "cuda:N")
		assert.Equal(t, "ChooseDevice", e.Op)
		b, err := core.OpenDefault()
		assert.Nil(t, b, env)
		e = requireErrKind(t, err, core.ErrInvalidArgument, "VYRECUDA_DEVICE")
		assert.Equal(t, "OpenDefault", e.Op)
	}
}

// Without VYRECUDA_DEVICE the choice follows what the driver reports: on a
// machine without a CUDA driver (CI, and any CGO_ENABLED=0 build) the
// simulated device, saying so. The CUDA side is TestOpenDefaultPicksTheGPU
// in the GPU suite.
func TestOpenDefaultProbesWithoutTheVariable(t *testing.T) {
	t.Setenv(core.DeviceEnv, "")
	if _, err := core.Devices(); !errors.Is(err, cudaapi.ErrDriverNotFound) {
		t.Skipf("a CUDA driver is present (%v): the GPU suite covers this machine", err)
	}
	choice, err := core.ChooseDevice()
	require.NoError(t, err)
	assert.Equal(t, core.DeviceChoice{Sim: true, Reason: "no CUDA driver found"}, choice)

	logs := &lockedLog{}
	b, err := core.OpenDefault(core.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	require.NoError(t, err)
	assert.Equal(t, sim.DefaultName, b.DeviceInfo().Name)
	assert.Contains(t, logs.String(), `reason="no CUDA driver found"`)
	require.NoError(t, b.Close())

	// Asking for CUDA explicitly fails rather than falling back.
	t.Setenv(core.DeviceEnv, "cuda:1")
	b, err = core.OpenDefault()
	assert.Nil(t, b)
	require.ErrorIs(t, err, cudaapi.ErrDriverNotFound)
	var ce *core.Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "OpenDefault", ce.Op)
}
