package core_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// TestDispatchCountBoundary: a program whose element count comes from one
// buffer touches that many elements of every buffer it binds, so a bound
// buffer even one byte short of count*ElemSize is refused before anything
// reaches the device, through Dispatch and Run alike; one of
// exactly that size, or longer, is accepted.
func TestDispatchCountBoundary(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	const n = 4 * 37 // the destination: 37 elements
	dst, err := b.Alloc(n + 3)
	require.NoError(t, err)
	for _, short := range []int{1, 2, 3, 4, 5} {
		src, err := b.Alloc(n - short)
		require.NoError(t, err)
		before := dev.CallCounts()
		err = b.Dispatch(core.ProgramCopyU32(), []core.Buffer{src, dst}, core.DispatchConfig{})
		require.ErrorIs(t, err, core.ErrInvalidArgument, "a source %d byte(s) short of the count", short)
		_, err = b.Run(core.Batch{Steps: []core.Step{{Program: core.ProgramCopyU32(), Bufs: []core.Buffer{src, dst}}}}, nil)
		require.ErrorIs(t, err, core.ErrInvalidArgument, "Run: a source %d byte(s) short of the count", short)
		require.Equal(t, before, dev.CallCounts(), "a refused dispatch reached the device")
		require.NoError(t, b.Free(src))
	}
	for _, extra := range []int{0, 1, 4} {
		src, err := b.Alloc(n + extra)
		require.NoError(t, err)
		require.NoError(t, b.Dispatch(core.ProgramCopyU32(), []core.Buffer{src, dst}, core.DispatchConfig{}), "a source of %d bytes", n+extra)
		require.NoError(t, b.Free(src))
	}
	require.NoError(t, b.Free(dst))
}
