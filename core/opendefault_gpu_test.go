//go:build gpu

package core_test

import (
	"fmt"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// On a GPU machine OpenDefault opens CUDA device 0 without the variable,
// says so in its log line, and honours VYRECUDA_DEVICE=sim and cuda:N.
func TestOpenDefaultPicksTheGPU(t *testing.T) {
	devs, err := core.Devices()
	require.NoError(t, err)
	require.NotEmpty(t, devs)

	t.Setenv(core.DeviceEnv, "")
	choice, err := core.ChooseDevice()
	require.NoError(t, err)
	assert.Equal(t, core.DeviceChoice{Reason: fmt.Sprintf("the CUDA driver reports %d device(s)", len(devs))}, choice)
	logs := &lockedLog{}
	b, err := core.OpenDefault(core.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	require.NoError(t, err)
	assert.Equal(t, devs[0].Name, b.DeviceInfo().Name)
	assert.Equal(t, 0, b.DeviceInfo().Ordinal)
	assert.Contains(t, logs.String(), "device=cuda:0")
	require.NoError(t, b.Close())

	t.Setenv(core.DeviceEnv, "sim")
	b, err = core.OpenDefault(core.WithLogger(quietLogger))
	require.NoError(t, err)
	assert.Equal(t, sim.DefaultName, b.DeviceInfo().Name)
	require.NoError(t, b.Close())

	last := len(devs) - 1
	t.Setenv(core.DeviceEnv, fmt.Sprintf("cuda:%d", last))
	b, err = core.OpenDefault(core.WithLogger(quietLogger))
	require.NoError(t, err)
	assert.Equal(t, last, b.DeviceInfo().Ordinal)
	require.NoError(t, b.Close())

	t.Setenv(core.DeviceEnv, fmt.Sprintf("cuda:%d", len(devs)))
	b, err = core.OpenDefault(core.WithLogger(quietLogger))
	assert.Nil(t, b)
	var ce *core.Error
	require.ErrorAs(t, err, &ce, "an ordinal past the last device fails, with no fallback")
	assert.Equal(t, "OpenDefault", ce.Op)
}
