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
// a single small upload from Go memory is one synchronous pageable copy
// (no staging DMA, no stream), larger or pinned ones are not, and every
// one lands its bytes.
func TestSmallUploadUsesTheDriversPageableCopy(t *testing.T) {
	b, dev := inlineSim(t)
	h, err := b.Alloc(256 << 10)
	require.NoError(t, err)
	pin, err := b.AllocHostPinned(4 << 10)
	require.NoError(t, err)
	defer func() { require.NoError(t, pin.Free()) }()
	for i := range pin.Bytes() {
		pin.Bytes()[i] = byte(i * 3)
	}
	cases := []struct {
		name          string
		data          []byte
		pageable, dma uint64
	}{
		{"4 KiB from Go memory", bytes.Repeat([]byte{7}, 4<<10), 1, 0},
		{"32 KiB from Go memory", bytes.Repeat([]byte{9}, 32<<10), 1, 0},
		{"32 KiB + 1 from Go memory", bytes.Repeat([]byte{11}, 32<<10+1), 0, 1},
		{"4 KiB pinned", pin.Bytes(), 0, 1},
	}
	for _, c := range cases {
		before := dev.CallCounts()
		require.NoError(t, b.Upload(core.UploadAt{Buf: h, Data: c.data}), c.name)
		after := dev.CallCounts()
		assert.Equal(t, c.pageable, after[sim.OpMemcpyHtoD]-before[sim.OpMemcpyHtoD], c.name)
		assert.Equal(t, c.dma, after[sim.OpMemcpyHtoDAsync]-before[sim.OpMemcpyHtoDAsync], c.name)
		got, err := b.Download(h.Slice(0, len(c.data)), nil)
		require.NoError(t, err)
		assert.True(t, bytes.Equal(got, c.data), c.name)
	}
}

// TestSmallUploadPageableFailureLeavesNothing: a failed pageable copy is
// the call's driver error, holds nothing (the buffer frees, the Backend
// closes) and the next upload works.
func TestSmallUploadPageableFailureLeavesNothing(t *testing.T) {
	b, dev := inlineSim(t)
	h, err := b.Alloc(4 << 10)
	require.NoError(t, err)
	dev.FailNth(sim.OpMemcpyHtoD, 1, cudaapi.CUDA_ERROR_UNKNOWN)
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
