package core_test

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// TestArgBufferAtItsLengthIsAccepted: an offset may be anything in
// [0, buf.Len], the end included (a kernel handed the end of a buffer, as
// a one-past-the-end pointer, touches nothing); one byte further is
// refused.
func TestArgBufferAtItsLengthIsAccepted(t *testing.T) {
	b, _ := openSim(t, sim.Config{})
	var seen []core.KernelArg
	p := typedProgram(t, []core.ParamType{core.ParamBuffer, core.ParamInt32}, func(_ core.KernelMemory, _ core.LaunchConfig, args []core.KernelArg) error {
		seen = append(seen[:0], args...)
		return nil
	})
	buf, err := b.Alloc(64)
	require.NoError(t, err)
	base, err := b.ResidentDevicePtr(buf)
	require.NoError(t, err)
	for _, off := range []int{0, 63, 64} {
		require.NoError(t, b.Dispatch(p, nil, core.DispatchConfig{Args: []core.Arg{core.ArgBufferAt(buf, off), core.ArgInt32(1)}}), "offset %d", off)
		require.Len(t, seen, 2)
		assert.Equal(t, base+uint64(off), seen[0].Ptr, "offset %d", off)
	}
	seen = nil
	err = b.Dispatch(p, nil, core.DispatchConfig{Args: []core.Arg{core.ArgBufferAt(buf, 65), core.ArgInt32(1)}})
	requireErrKind(t, err, core.ErrInvalidArgument, "offset 65 is outside")
	assert.Empty(t, seen, "a refused dispatch runs nothing")
	require.NoError(t, b.Free(buf))
}

// TestDownloadSliceFillsAnExactCapacityInPlace: a destination whose
// capacity is exactly the element count is filled where it is; only a
// smaller one is replaced by a new slice.
func TestDownloadSliceFillsAnExactCapacityInPlace(t *testing.T) {
	b, _ := openSim(t, sim.Config{})
	want := []float64{1.5, -2, 3.25, 4, 5e10}
	h, err := core.AllocSlice[float64](b, len(want))
	require.NoError(t, err)
	require.NoError(t, core.UploadSlice(b, h, want))

	exact := make([]float64, 2, len(want))
	got, err := core.DownloadSlice(b, h, exact)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	assert.Equal(t, unsafe.SliceData(exact), unsafe.SliceData(got), "cap(dst) == the element count must not reallocate")
	assert.Equal(t, want, exact[:len(want)])

	short := make([]float64, 0, len(want)-1)
	got, err = core.DownloadSlice(b, h, short)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	assert.NotEqual(t, unsafe.SliceData(short), unsafe.SliceData(got), "a smaller capacity needs a new slice")
	require.NoError(t, b.Free(h))
}
