package core_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// inlineSim opens a simulated device that says small pageable copies beat
// the staging (Capabilities.InlineCopies), as a CUDA driver does.
func inlineSim(t *testing.T) (*core.Backend, *sim.Device) {
	caps := sim.DefaultCapabilities()
	caps.InlineCopies = true
	return openSim(t, sim.Config{Capabilities: &caps})
}

// TestSmallUploadUsesTheDriversPageableCopy: on a driver with InlineCopies
// a single small upload from Go memory is handed to the driver as it is
// (one copy, no pinned staging taken), larger ones are staged, pinned ones
// are direct, and every one lands its bytes.
func TestSmallUploadUsesTheDriversPageableCopy(t *testing.T) {
	cases := []struct {
		name    string
		n       int
		pinned  bool
		staging bool
	}{
		{"4 KiB from Go memory", 4 << 10, false, false},
		{"32 KiB from Go memory", 32 << 10, false, false},
		{"4 KiB pinned", 4 << 10, true, false},
		{"32 KiB + 1 from Go memory", 32<<10 + 1, false, true},
	}
	for _, c := range cases {
		b, dev := inlineSim(t) // a fresh Backend: no staging taken yet
		h, err := b.Alloc(c.n)
		require.NoError(t, err)
		data := make([]byte, c.n)
		if c.pinned {
			pin, err := b.AllocHostPinned(c.n)
			require.NoError(t, err)
			defer func() { require.NoError(t, pin.Free()) }()
			data = pin.Bytes()
		}
		for i := range data {
			data[i] = byte(i*7 + c.n)
		}
		before := dev.CallCounts()
		require.NoError(t, b.Upload(core.UploadAt{Buf: h, Data: data}), c.name)
		after := dev.CallCounts()
		assert.Equal(t, uint64(1), after[sim.OpMemcpyHtoDAsync]-before[sim.OpMemcpyHtoDAsync], c.name)
		assert.Zero(t, after[sim.OpMemcpyHtoD]-before[sim.OpMemcpyHtoD], c.name)
		assert.Equal(t, c.staging, b.MemoryStats().ReservedPinned > 0, "%s: pinned staging taken", c.name)
		got, err := b.Download(h.All(), nil)
		require.NoError(t, err)
		assert.True(t, bytes.Equal(got, data), c.name)
	}
}

// TestSmallUploadPageableFailureLeavesNothing: a failed pageable copy is
// the call's driver error, holds nothing (the buffer frees, the Backend
// closes) and the next upload works.
func TestSmallUploadPageableFailureLeavesNothing(t *testing.T) {
	b, dev := inlineSim(t)
	h, err := b.Alloc(4 << 10)
	require.NoError(t, err)
	dev.FailNth(sim.OpMemcpyHtoDAsync, 1, cudaapi.CUDA_ERROR_UNKNOWN)
	err = b.Upload(core.UploadAt{Buf: h, Data: make([]byte, 4<<10)})
	require.ErrorIs(t, err, core.ErrDriver)
	var ce *core.Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "Upload", ce.Op)
	data := bytes.Repeat([]byte{5}, 4<<10)
	require.NoError(t, b.Upload(core.UploadAt{Buf: h, Data: data}))
	got, err := b.Download(h.All(), nil)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(got, data))
	require.NoError(t, b.Free(h))
}
