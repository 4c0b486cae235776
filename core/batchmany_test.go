package core_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// TestManySmallPinnedCopiesArePacked: a batch with many small uploads from
// and reads into pinned memory packs them (one scatter, one gather) rather
// than moving each by its own DMA, while the same count of 64 KiB pieces
// goes direct; the bytes land either way.
func TestManySmallPinnedCopiesArePacked(t *testing.T) {
	for _, size := range []int{4 << 10, 64 << 10} {
		b, _ := openSim(t, sim.Config{TotalMemory: 256 << 20})
		const n = 40
		in, err := b.AllocHostPinned(n * size)
		require.NoError(t, err)
		out, err := b.AllocHostPinned(n * size)
		require.NoError(t, err)
		var batch core.Batch
		for i := range n {
			h, err := b.Alloc(size)
			require.NoError(t, err)
			data := in.Bytes()[i*size : (i+1)*size]
			for k := range data {
				data[k] = byte(i + k)
			}
			batch.Uploads = append(batch.Uploads, core.UploadAt{Buf: h, Data: data})
			batch.Reads = append(batch.Reads, h.All())
			batch.Into = append(batch.Into, out.Bytes()[i*size:(i+1)*size])
		}
		b.ResetTelemetry()
		got, err := b.Run(batch, nil)
		require.NoError(t, err)
		require.True(t, bytes.Equal(in.Bytes(), out.Bytes()), "size %d", size)
		for i := range n {
			require.Equal(t, &batch.Into[i][0], &got[i][0], "size %d: read %d's slot is its Into", size, i)
		}
		tel := b.Telemetry()
		if size < 64<<10 {
			assert.Equal(t, uint64(2), tel.PackedLaunches, "4 KiB pieces: one scatter and one gather")
			assert.Less(t, tel.DeviceCopies, uint64(n), "4 KiB pieces are packed, not a DMA each")
		} else {
			assert.Zero(t, tel.PackedLaunches, "64 KiB pieces move directly")
			assert.Equal(t, uint64(2*n), tel.DeviceCopies, "64 KiB pieces: a DMA each way each")
		}
		require.NoError(t, in.Free())
		require.NoError(t, out.Free())
	}
}
