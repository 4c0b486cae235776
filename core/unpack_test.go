package core_test

import (
	"bytes"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// Readbacks unpack staging into the caller's slots with the built-in copy
// below 16 MiB and with non-temporal stores from there: every slot gets
// exactly its buffer's bytes, whatever its length and its alignment inside
// the caller's storage, reused slots keep their storage, and the bytes
// around each slot are untouched. Small and large batches take both
// copies; the plain-copy tuning gives the same result, and so do keeping
// the staging in the caches and evicting it.
func TestUnpackedSlotsHoldExactlyTheirBytes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		count int
		size  int
		opt   core.Option
	}{
		{"small", 96, 4100, nil},
		{"large", 300, 64 << 10, nil},
		{"large plain", 300, 64 << 10, core.WithTransferTuning(core.TransferTuning{PlainUnpack: true})},
		{"small staging kept", 96, 4100, core.WithStagingCache(core.StagingCache{Evict: core.EvictNever})},
		{"small staging evicted", 96, 4100, core.WithStagingCache(core.StagingCache{Evict: core.EvictAlways})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var opts []core.Option
			if tc.opt != nil {
				opts = append(opts, tc.opt)
			}
			b, dev := openSim(t, sim.Config{TotalMemory: 256 << 20}, opts...)
			r := rand.New(rand.NewSource(11))
			hs := make([]core.Buffer, tc.count)
			want := make([][]byte, tc.count)
			ups := make([]core.UploadAt, tc.count)
			for i := range hs {
				n := tc.size - r.Intn(70) // odd lengths around the copies' 64-byte body
				h, err := b.Alloc(n)
				require.NoError(t, err)
				hs[i], want[i] = h, randomBytes(r, n)
				ups[i] = core.UploadAt{Buf: h, Data: want[i]}
			}
			require.NoError(t, b.Upload(ups...))
			// Slots carved out of one backing array at odd offsets, with
			// guard bytes between them.
			backing := bytes.Repeat([]byte{0xCD}, tc.count*(tc.size+80))
			dst := make([][]byte, tc.count)
			at := make([]int, tc.count)
			off := 0
			for i, h := range hs {
				off += 1 + r.Intn(15)
				at[i] = off
				dst[i] = backing[off : off : off+h.Len]
				off += h.Len + 16
			}
			got, err := b.DownloadMany(allOf(hs), dst)
			require.NoError(t, err)
			for i := range hs {
				require.Equal(t, want[i], got[i], "slot %d", i)
				require.Same(t, &backing[at[i]], &got[i][0], "slot %d reuses its storage", i)
			}
			for i := range hs {
				end := at[i] + hs[i].Len
				next := len(backing)
				if i+1 < len(hs) {
					next = at[i+1]
				}
				for k := end; k < next; k++ {
					require.Equal(t, byte(0xCD), backing[k], "guard byte %d after slot %d", k, i)
				}
			}
			fresh, err := b.DownloadMany(allOf(hs), nil)
			require.NoError(t, err)
			require.Equal(t, want, fresh)
			for _, h := range hs {
				require.NoError(t, b.Free(h))
			}
			require.NoError(t, b.Close())
			sim.RequireNoLeaks(t, dev)
		})
	}
}
