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

// Small uploads from Go memory on a driver with inline copies return
// without a host wait: the simulated streams are lazy, so a reader that
// were not ordered after such an upload would read the bytes from before
// it. These tests read through every kind of call right after one.

func filled(n int, v byte) []byte { return bytes.Repeat([]byte{v}, n) }

// TestSmallUploadNeedsNoFence: the upload makes no host wait and leaves
// one unfenced lease; the next call that leases a stream recycles it.
func TestSmallUploadNeedsNoFence(t *testing.T) {
	b, dev := inlineSim(t)
	h, err := b.Alloc(4 << 10)
	require.NoError(t, err)
	before := dev.CallCounts()
	require.NoError(t, b.Upload(core.UploadAt{Buf: h, Data: filled(4<<10, 3)}))
	after := dev.CallCounts()
	assert.Zero(t, after[sim.OpStreamSynchronize]-before[sim.OpStreamSynchronize], "no host wait")
	assert.Zero(t, b.Telemetry().SyncPoints)
	c := b.LaunchResourceCounts()
	assert.Equal(t, 1, c.Unfenced)
	assert.Zero(t, c.Leases)
	got, err := b.Download(h.All(), nil)
	require.NoError(t, err)
	assert.Equal(t, filled(4<<10, 3), got)
	assert.Zero(t, b.LaunchResourceCounts().Unfenced, "the download's lease recycled it")
	require.NoError(t, b.Free(h))
}

// bufferReaders returns every kind of call that reads a whole buffer back
// on one Backend, by name: a Download, a DownloadMany, a Run and a graph
// replay.
func bufferReaders() map[string]func(b *core.Backend, h core.Buffer) ([]byte, error) {
	return map[string]func(b *core.Backend, h core.Buffer) ([]byte, error){
		"Download": func(b *core.Backend, h core.Buffer) ([]byte, error) { return b.Download(h.All(), nil) },
		"DownloadMany": func(b *core.Backend, h core.Buffer) ([]byte, error) {
			out, err := b.DownloadMany([]core.Range{h.All(), h.All()}, nil)
			if err != nil {
				return nil, err
			}
			return out[1], nil
		},
		"Run": func(b *core.Backend, h core.Buffer) ([]byte, error) {
			out, err := b.Run(core.Batch{Reads: []core.Range{h.All()}}, nil)
			if err != nil {
				return nil, err
			}
			return out[0], nil
		},
		"Graph.Replay": func(b *core.Backend, h core.Buffer) ([]byte, error) {
			g, err := b.Capture(core.Batch{Reads: []core.Range{h.All()}})
			if err != nil {
				return nil, err
			}
			defer g.Close()
			out, err := g.Replay(nil)
			if err != nil {
				return nil, err
			}
			return out[0], nil
		},
	}
}

// TestReadersAfterSmallUploadsSeeTheirBytes: whatever reads a buffer after
// small uploads returned sees their bytes, in order, also while the device
// reports the uploads unfinished (HoldQueries: the readers' streams then
// wait for them on the device).
func TestReadersAfterSmallUploadsSeeTheirBytes(t *testing.T) {
	readers := bufferReaders()
	for name, read := range readers {
		for _, hold := range []bool{false, true} {
			b, dev := inlineSim(t)
			h, err := b.Alloc(8 << 10)
			require.NoError(t, err)
			dev.HoldQueries(hold)
			for v := byte(1); v <= 3; v++ {
				require.NoError(t, b.Upload(core.UploadAt{Buf: h, Data: filled(8<<10, v)}))
			}
			require.NoError(t, b.Upload(core.UploadAt{Buf: h, Offset: 4 << 10, Data: filled(4<<10, 9)}))
			got, err := read(b, h)
			require.NoError(t, err, "%s, held %t", name, hold)
			want := append(filled(4<<10, 3), filled(4<<10, 9)...)
			assert.True(t, bytes.Equal(want, got), "%s, held %t: the reader saw bytes from before the uploads", name, hold)
			dev.HoldQueries(false)
			require.NoError(t, b.Free(h))
		}
	}
}

// TestAsyncUploadAfterSmallUploadLandsLast: an UploadAsync on the stream
// the Backend already holds, after a small upload to the same bytes, lands
// after it.
func TestAsyncUploadAfterSmallUploadLandsLast(t *testing.T) {
	b, dev := inlineSim(t)
	dev.HoldQueries(true)
	h, err := b.Alloc(4 << 10)
	require.NoError(t, err)
	pin, err := b.AllocHostPinned(8 << 10)
	require.NoError(t, err)
	copy(pin.Bytes(), filled(8<<10, 5))
	require.NoError(t, b.UploadAsync(core.UploadAt{Buf: h, Data: pin.Bytes()[:4<<10]})) // holds the stream
	require.NoError(t, b.Upload(core.UploadAt{Buf: h, Data: filled(4<<10, 6)}))
	copy(pin.Bytes()[4<<10:], filled(4<<10, 7))
	require.NoError(t, b.UploadAsync(core.UploadAt{Buf: h, Data: pin.Bytes()[4<<10:]}))
	require.NoError(t, b.SynchronizeUploads())
	dev.HoldQueries(false)
	got, err := b.Download(h.All(), nil)
	require.NoError(t, err)
	assert.Equal(t, filled(4<<10, 7), got)
	require.NoError(t, b.Free(h))
	require.NoError(t, pin.Free())
}

// TestPeerCopyAfterSmallUploadCopiesItsBytes: a peer copy queued on the
// destination's stream reads what a small upload on the source wrote.
func TestPeerCopyAfterSmallUploadCopiesItsBytes(t *testing.T) {
	caps := sim.DefaultCapabilities()
	caps.InlineCopies = true
	m, err := sim.NewMachine(sim.MachineConfig{Devices: 2, Device: sim.Config{TotalMemory: 64 << 20, Capabilities: &caps}})
	require.NoError(t, err)
	g, err := core.OpenGroup(m.Drivers())
	require.NoError(t, err)
	defer func() {
		require.NoError(t, g.Close())
		sim.RequireMachineNoLeaks(t, m)
	}()
	a, c := g.Backends()[0], g.Backends()[1]
	m.Device(0).HoldQueries(true)
	src, err := a.Alloc(4 << 10)
	require.NoError(t, err)
	dst, err := c.Alloc(4 << 10)
	require.NoError(t, err)
	require.NoError(t, a.Upload(core.UploadAt{Buf: src, Data: filled(4<<10, 8)}))
	require.NoError(t, core.CopyPeer(c, a, []core.PeerCopy{{Dst: dst, Src: src, Len: 4 << 10}}))
	assert.Zero(t, a.LaunchResourceCounts().Unfenced, "the source's unfenced upload was waited for")
	m.Device(0).HoldQueries(false)
	got, err := c.Download(dst.All(), nil)
	require.NoError(t, err)
	assert.Equal(t, filled(4<<10, 8), got)
	require.NoError(t, a.Free(src))
	require.NoError(t, c.Free(dst))
}

// TestUnfencedUploadsEndBeforeMemoryOrTheBackendGoes: Trim (device memory
// back to the driver) and Close wait for unfenced uploads; nothing leaks.
func TestUnfencedUploadsEndBeforeMemoryOrTheBackendGoes(t *testing.T) {
	b, dev := inlineSim(t)
	dev.HoldQueries(true)
	h, err := b.Alloc(4 << 10)
	require.NoError(t, err)
	require.NoError(t, b.Upload(core.UploadAt{Buf: h, Data: filled(4<<10, 1)}))
	require.NoError(t, b.Free(h))
	require.NoError(t, b.Trim())
	assert.Zero(t, b.LaunchResourceCounts().Unfenced, "Trim waited")
	h, err = b.Alloc(4 << 10)
	require.NoError(t, err)
	for range 20 { // past the bound on unfenced leases
		require.NoError(t, b.Upload(core.UploadAt{Buf: h, Data: filled(4<<10, 2)}))
	}
	assert.LessOrEqual(t, b.LaunchResourceCounts().Unfenced, 8)
	require.NoError(t, b.Free(h))
	require.NoError(t, b.Close()) // openSim's cleanup checks for leaks
}

// TestUnfencedUploadFailureSurfacesInTheNextCall: a device failure after
// a small upload is the error of the next call, which queues behind it and
// changes nothing of the caller's; the call after that works.
func TestUnfencedUploadFailureSurfacesInTheNextCall(t *testing.T) {
	b, dev := inlineSim(t)
	h, err := b.Alloc(4 << 10)
	require.NoError(t, err)
	require.NoError(t, b.Upload(core.UploadAt{Buf: h, Data: filled(4<<10, 1)}))
	dev.FailNth(sim.OpStreamSynchronize, 1, cudaapi.CUDA_ERROR_LAUNCH_FAILED)
	dst := filled(4<<10, 0xEE)
	out, err := b.Download(h.All(), dst)
	require.ErrorIs(t, err, core.ErrDriver)
	var ce *core.Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "Download", ce.Op)
	assert.Equal(t, filled(4<<10, 0xEE), out, "the caller's output is unchanged")
	got, err := b.Download(h.All(), nil)
	require.NoError(t, err)
	assert.Equal(t, filled(4<<10, 1), got)
	require.NoError(t, b.Free(h))
}
