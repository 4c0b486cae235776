//go:build !gpu

// The driver-not-found checks point the loader at a missing library, which
// sticks for the whole process; under the gpu tag the real library must load,
// so these run only in the GPU-free build.

package core_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// withoutDriver points the loader at a library that does not exist. The
// loader opens once per process, so if a real libcuda was already loaded the
// test cannot simulate its absence and is skipped.
func withoutDriver(t *testing.T) {
	t.Setenv("VYRECUDA_LIBCUDA", filepath.Join(t.TempDir(), "no-such-libcuda.so.1"))
	if cudaapi.Loaded() == nil {
		t.Skip("libcuda is already loaded in this process; the absent-driver path cannot be exercised")
	}
}

func TestCUDAWithoutDriver(t *testing.T) {
	withoutDriver(t)
	calls := []struct {
		name, op string
		call     func() (any, error)
	}{
		{"OpenCUDA", "OpenCUDA", func() (any, error) { return core.OpenCUDA(0) }},
		{"OpenCUDA bad ordinal", "OpenCUDA", func() (any, error) { return core.OpenCUDA(-1) }},
		{"NewCUDADriver", "NewCUDADriver", func() (any, error) { return core.NewCUDADriver(0) }},
		{"Devices", "Devices", func() (any, error) { return core.Devices() }},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			var got any
			var err error
			require.NotPanics(t, func() { got, err = c.call() })
			require.Error(t, err)
			assert.ErrorIs(t, err, cudaapi.ErrDriverNotFound)
			assert.ErrorIs(t, err, core.ErrUnsupported)
			var ce *core.Error
			require.True(t, errors.As(err, &ce), "want *core.Error, got %T", err)
			assert.Equal(t, c.op, ce.Op, "the error names the call the caller made")
			assert.NotEmpty(t, ce.Fix)
			assert.Equal(t, 1, strings.Count(err.Error(), "Fix: "), "one Fix sentence, not the loader's and ours: %v", err)
			assert.Contains(t, err.Error(), "VYRECUDA_LIBCUDA", "the loader says how to point at libcuda")
			assert.Nil(t, nilIfTyped(got), "a failed call must return no value")
		})
	}
}

// nilIfTyped turns a typed nil (*Backend(nil), []DeviceSummary(nil), a nil
// Driver) into an untyped nil so the assertion above reads plainly.
func nilIfTyped(v any) any {
	switch x := v.(type) {
	case *core.Backend:
		if x == nil {
			return nil
		}
	case []core.DeviceSummary:
		if x == nil {
			return nil
		}
	case core.Driver:
		if x == nil {
			return nil
		}
	case nil:
		return nil
	}
	return v
}

// closingDriver is a simulated driver that owns something to release, like
// OpenCUDA's driver owns its context.
type closingDriver struct {
	*sim.Device
	closes int
	err    error
}

func (d *closingDriver) Close() error { d.closes++; return d.err }

func TestBackendCloseClosesOwnedDriver(t *testing.T) {
	boom := errors.New("release failed")
	tests := []struct {
		name    string
		err     error
		wantErr error
	}{
		{"clean", nil, nil},
		{"release fails", boom, boom},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			drv := &closingDriver{Device: sim.New(sim.Config{TotalMemory: 64 << 20}), err: tc.err}
			b, err := core.Open(drv)
			require.NoError(t, err)
			h, err := b.Alloc(4096)
			require.NoError(t, err)
			require.NoError(t, b.Upload(core.UploadAt{Buf: h, Data: make([]byte, 4096)}))

			err = b.Close()
			if tc.wantErr == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tc.wantErr)
			}
			assert.Equal(t, 1, drv.closes, "Close must close the driver once")
			sim.RequireNoLeaks(t, drv.Device) // released through the driver before it was closed
			assert.ErrorIs(t, b.Close(), core.ErrClosed)
			assert.Equal(t, 1, drv.closes, "a second Close must not close the driver again")
		})
	}
}

func TestBackendCloseRefusedKeepsDriverOpen(t *testing.T) {
	drv := &closingDriver{Device: sim.New(sim.Config{TotalMemory: 64 << 20})}
	b, err := core.Open(drv)
	require.NoError(t, err)
	h, err := b.Alloc(64)
	require.NoError(t, err)
	_, release, err := core.PinForTest(b, []core.Buffer{h})
	require.NoError(t, err)
	require.ErrorIs(t, b.Close(), core.ErrInFlight)
	assert.Zero(t, drv.closes, "a refused Close must leave the driver open")
	release()
	require.NoError(t, b.Close())
	assert.Equal(t, 1, drv.closes)
	sim.RequireNoLeaks(t, drv.Device)
}
