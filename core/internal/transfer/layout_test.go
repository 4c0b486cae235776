package transfer

import (
	"encoding/binary"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core/kernels"
)

// The table of a packed block covers every piece exactly once, in order
// (an empty piece has no entry):
// each piece's entries move, between consecutive device addresses and
// consecutive places in the block, its bytes and nothing else; every entry
// but a piece's last len%16 bytes is a multiple of 16 bytes and at most
// packEntryBytes long (so the kernels move 16-byte words), and the block
// fits packedBound.
func TestPackLayoutEntriesCoverEachPieceExactly(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	for round := range 200 {
		n := 1 + r.Intn(40)
		lens := make([]int, n)
		var bytes uint64
		for i := range lens {
			lens[i] = 1 + r.Intn([]int{20, 5000, 70000}[r.Intn(3)])
			switch r.Intn(4) {
			case 0: // whole 16-byte words: one entry up to packEntryBytes
				lens[i] = (lens[i] + 15) &^ 15
			case 1:
				lens[i] = []int{0, 16, packEntryBytes, packEntryBytes + 16}[r.Intn(4)]
			}
			bytes += uint64(lens[i])
		}
		lay := NewLayout(n, func(i int) int { return lens[i] })
		require.LessOrEqual(t, int64(lay.Total), PackedBound(n, bytes), "round %d", round)
		stage := make([]byte, lay.Total)
		addrs := make([]uint64, n)
		for i := range lens {
			addrs[i] = uint64(1<<40 + i<<20 + r.Intn(3)*16)
			lay.PutEntries(stage, i, addrs[i], lens[i])
		}
		e := 0
		for i, want := range lens {
			require.Equal(t, e, lay.first[i], "round %d piece %d", round, i)
			require.Zero(t, lay.Offs[i]%packAlign)
			moved := 0
			for moved < want {
				require.Less(t, e, lay.Entries, "round %d piece %d: entries end early", round, i)
				ent := stage[lay.Table+e*kernels.TableEntryBytes:]
				addr, off, m := binary.LittleEndian.Uint64(ent), binary.LittleEndian.Uint64(ent[8:]), int(binary.LittleEndian.Uint64(ent[16:]))
				require.Equal(t, addrs[i]+uint64(moved), addr, "round %d piece %d entry %d", round, i, e)
				require.Equal(t, uint64(lay.Offs[i]+moved), off, "round %d piece %d entry %d", round, i, e)
				require.Positive(t, m)
				require.LessOrEqual(t, m, packEntryBytes)
				if moved+m < want || want%16 == 0 {
					require.Zero(t, m%16, "round %d piece %d entry %d: only the tail is ragged", round, i, e)
				} else {
					require.Less(t, m, 16, "round %d piece %d: the ragged tail is an entry of its own", round, i)
				}
				moved += m
				e++
			}
			require.Equal(t, want, moved, "round %d piece %d", round, i)
			require.Equal(t, pieceEntries(want), e-lay.first[i])
		}
		require.Equal(t, lay.Entries, e, "round %d: no entry left over", round)
		require.Equal(t, lay.Table+lay.Entries*kernels.TableEntryBytes, lay.Total)
	}
}
