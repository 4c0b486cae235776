package fusion

import (
	"errors"
	"math"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/accounting"
)

// applyPeer runs copies in order over one flat memory where addresses are
// indexes, as a device would, and returns the memory.
func applyPeer(mem []byte, copies []PeerCopy) []byte {
	out := append([]byte(nil), mem...)
	for _, c := range copies {
		tmp := append([]byte(nil), out[c.Src:c.Src+uint64(c.Len)]...)
		copy(out[c.Dst:], tmp)
	}
	return out
}

func TestFusePeerCopiesMergesContinuingRuns(t *testing.T) {
	in := []PeerCopy{
		{Dst: 100, Src: 0, Len: 4},
		{Dst: 104, Src: 4, Len: 4},  // continues both sides
		{Dst: 108, Src: 12, Len: 4}, // continues dst only
		{Dst: 0, Src: 0, Len: 0},    // empty, dropped
		{Dst: 112, Src: 16, Len: 8}, // continues the previous on both sides
	}
	fused, bytes, err := FusePeerCopies(in)
	require.NoError(t, err)
	assert.Equal(t, uint64(20), bytes)
	assert.Equal(t, []PeerCopy{{Dst: 100, Src: 0, Len: 8}, {Dst: 108, Src: 12, Len: 12}}, fused)
}

func TestFusePeerCopiesRejectsBadInput(t *testing.T) {
	in := []PeerCopy{{Dst: 1, Src: 2, Len: 3}, {Dst: 4, Src: 5, Len: -1}}
	snapshot := append([]PeerCopy(nil), in...)
	_, _, err := FusePeerCopies(in)
	assert.True(t, errors.Is(err, accounting.ErrNegative), "%v", err)
	assert.Equal(t, snapshot, in)
	_, _, err = FusePeerCopies([]PeerCopy{{Dst: math.MaxUint64 - 2, Src: 0, Len: 4}})
	assert.True(t, errors.Is(err, accounting.ErrOverflow), "%v", err)
	_, _, err = FusePeerCopies([]PeerCopy{{Dst: 0, Src: math.MaxUint64, Len: 1}})
	assert.True(t, errors.Is(err, accounting.ErrOverflow), "%v", err)
	fused, bytes, err := FusePeerCopies(nil)
	assert.NoError(t, err)
	assert.Zero(t, bytes)
	assert.Empty(t, fused)
}

// TestFusePeerCopiesKeepsTheEffect states the contract on random input with
// overlaps and chains: running the fused copies leaves memory exactly as
// running the requests does, never with more copies or other byte totals.
func TestFusePeerCopiesKeepsTheEffect(t *testing.T) {
	rng := rand.New(rand.NewSource(17))
	for trial := 0; trial < 500; trial++ {
		mem := make([]byte, 256)
		rng.Read(mem)
		var in []PeerCopy
		var want uint64
		for k := rng.Intn(12); k > 0; k-- {
			n := rng.Intn(24)
			c := PeerCopy{Dst: uint64(rng.Intn(256 - n + 1)), Src: uint64(rng.Intn(256 - n + 1)), Len: n}
			if len(in) > 0 && rng.Intn(2) == 0 { // often continue the previous one
				p := in[len(in)-1]
				if e := p.Dst + uint64(p.Len); e+uint64(n) <= 256 {
					c.Dst = e
				}
				if e := p.Src + uint64(p.Len); e+uint64(n) <= 256 {
					c.Src = e
				}
			}
			in = append(in, c)
			want += uint64(n)
		}
		fused, bytes, err := FusePeerCopies(in)
		require.NoError(t, err)
		assert.Equal(t, want, bytes)
		assert.LessOrEqual(t, len(fused), len(in))
		require.Equal(t, applyPeer(mem, in), applyPeer(mem, fused), "trial %d: %v -> %v", trial, in, fused)
	}
}
