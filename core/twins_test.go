package core_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/kernels"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// byteTwin is a Go twin that sets every byte of its one buffer to v.
func byteTwin(v byte, n int) core.HostKernel {
	return func(mem core.KernelMemory, _ core.LaunchConfig, args []core.KernelArg) error {
		b, err := mem.Bytes(args[0].Ptr, n)
		if err != nil {
			return err
		}
		for i := range b {
			b[i] = v
		}
		return nil
	}
}

// Two Programs with the same image and entry but different Go twins each run
// their own twin, whichever was resolved first, alone or in one Batch.
func TestSameImageAndEntryEachRunItsOwnTwin(t *testing.T) {
	b, _ := openSim(t, sim.Config{})
	spec := func(v byte) core.ProgramSpec {
		return core.ProgramSpec{Name: "set", Image: kernels.FillPTX, Entry: kernels.FillEntry,
			Grid: core.GridRule{Blocks: 1}, Buffers: 1, Host: byteTwin(v, 8)}
	}
	p1, err := core.NewProgram(spec(1))
	require.NoError(t, err)
	p2, err := core.NewProgram(spec(2))
	require.NoError(t, err)
	x, y := residentWith(t, b, make([]byte, 8)), residentWith(t, b, make([]byte, 8))

	require.NoError(t, b.Dispatch(p1, []core.Buffer{x}, core.DispatchConfig{}))
	require.NoError(t, b.Dispatch(p2, []core.Buffer{y}, core.DispatchConfig{}))
	got, err := b.DownloadMany(allOf([]core.Buffer{x, y}), nil)
	require.NoError(t, err)
	assert.Equal(t, []byte{1, 1, 1, 1, 1, 1, 1, 1}, got[0])
	assert.Equal(t, []byte{2, 2, 2, 2, 2, 2, 2, 2}, got[1], "the second program ran the first one's twin")

	// In one batch, in the other order, with the functions already resolved.
	out, err := b.Run(core.Batch{
		Steps: []core.Step{{Program: p2, Bufs: []core.Buffer{x}}, {Program: p1, Bufs: []core.Buffer{y}}},
		Reads: []core.Range{{Buf: x, Len: 8}, {Buf: y, Len: 8}},
	}, nil)
	require.NoError(t, err)
	assert.Equal(t, []byte{2, 2, 2, 2, 2, 2, 2, 2}, out[0])
	assert.Equal(t, []byte{1, 1, 1, 1, 1, 1, 1, 1}, out[1])
	require.NoError(t, b.Free(x))
	require.NoError(t, b.Free(y))
}
