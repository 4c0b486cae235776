//go:build gpu

package core_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
)

// TestGPUReadersAfterSmallUploadsSeeTheirBytes: on a real device small
// uploads from Go memory return without a fence, and every kind of reader
// called after them, on whatever stream, sees their bytes in order: a
// Download, a DownloadMany, a Run, a graph replay and a peer copy to a
// second Backend, each right after a burst of small uploads to the buffer
// (the last ones still on their way to the device when the reader is
// queued).
func TestGPUReadersAfterSmallUploadsSeeTheirBytes(t *testing.T) {
	a, other := openGPUPair(t)
	const n = 32 << 10
	h, err := a.Alloc(n)
	require.NoError(t, err)
	peer, err := other.Alloc(n)
	require.NoError(t, err)
	defer func() {
		require.NoError(t, a.Free(h))
		require.NoError(t, other.Free(peer))
	}()
	readers := map[string]func() ([]byte, error){}
	for name, read := range bufferReaders() {
		readers[name] = func() ([]byte, error) { return read(a, h) }
	}
	readers["CopyPeer"] = func() ([]byte, error) {
		if err := core.CopyPeer(other, a, []core.PeerCopy{{Dst: peer, Src: h, Len: n}}); err != nil {
			return nil, err
		}
		return other.Download(peer.All(), nil)
	}
	for round := range 50 {
		for name, read := range readers {
			want := make([]byte, n)
			for i := range 8 { // eight uploads of 4 KiB, then one over them all
				piece := pattern(4<<10, byte(round*8+i))
				require.NoError(t, a.Upload(core.UploadAt{Buf: h, Offset: i * 4 << 10, Data: piece}))
				copy(want[i*4<<10:], piece)
			}
			last := pattern(n, byte(round)^0x5a)
			require.NoError(t, a.Upload(core.UploadAt{Buf: h, Data: last}))
			copy(want, last)
			got, err := read()
			require.NoError(t, err, name)
			if !bytes.Equal(got, want) {
				t.Fatalf("%s, round %d: read bytes other than the uploads before it left", name, round)
			}
		}
	}
}
