package core_test

import (
	"encoding/binary"
	"math"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

func TestTypedSlicesRoundTripLittleEndian(t *testing.T) {
	b, _ := openSim(t, sim.Config{})
	src := []float64{1.5, -2, math.Inf(1), math.SmallestNonzeroFloat64}
	h, err := core.AllocSlice[float64](b, len(src))
	require.NoError(t, err)
	assert.Equal(t, 32, h.Len)
	require.NoError(t, core.UploadSlice(b, h, src))
	raw, err := b.Download(h.All(), nil)
	require.NoError(t, err)
	for i, v := range src {
		assert.Equal(t, math.Float64bits(v), binary.LittleEndian.Uint64(raw[8*i:]), "element %d is stored little-endian", i)
	}
	require.NoError(t, core.UploadSliceAt(b, h, 2, []float64{7}))
	got, err := core.DownloadSlice[float64](b, h, nil)
	require.NoError(t, err)
	assert.Equal(t, []float64{1.5, -2, 7, math.SmallestNonzeroFloat64}, got)

	// Enough capacity: the download lands in dst's own storage.
	dst := make([]float64, 1, 8)
	out, err := core.DownloadSlice(b, h, dst)
	require.NoError(t, err)
	assert.Equal(t, unsafe.SliceData(dst), unsafe.SliceData(out))
	assert.Len(t, out, 4)

	type celsius int16 // a named type of a fixed-size kind works too
	hc, err := core.AllocSlice[celsius](b, 3)
	require.NoError(t, err)
	require.NoError(t, core.UploadSlice(b, hc, []celsius{-40, 0, 100}))
	cs, err := core.DownloadSlice[celsius](b, hc, nil)
	require.NoError(t, err)
	assert.Equal(t, []celsius{-40, 0, 100}, cs)

	cx, err := core.AllocSlice[complex64](b, 1)
	require.NoError(t, err)
	require.NoError(t, core.UploadSlice(b, cx, []complex64{complex(1, 2)}))
	raw, err = b.Download(cx.All(), nil)
	require.NoError(t, err)
	assert.Equal(t, math.Float32bits(1), binary.LittleEndian.Uint32(raw), "real part first")
	assert.Equal(t, math.Float32bits(2), binary.LittleEndian.Uint32(raw[4:]))
}

func TestTypedSliceRefusalsLeaveThingsAsTheyWere(t *testing.T) {
	b, _ := openSim(t, sim.Config{})
	_, err := core.AllocSlice[int32](b, 0)
	requireErrKind(t, err, core.ErrInvalidArgument, "0 elements of 4 bytes")
	_, err = core.AllocSlice[int64](b, math.MaxInt/4)
	requireErrKind(t, err, core.ErrInvalidArgument)
	h, err := core.AllocSlice[uint32](b, 4)
	require.NoError(t, err)
	e := requireErrKind(t, core.UploadSlice(b, h, []uint32{1, 2, 3}), core.ErrInvalidArgument)
	assert.Equal(t, "UploadSlice", e.Op)
	e = requireErrKind(t, core.UploadSliceAt(b, h, 3, []uint32{1, 2}), core.ErrInvalidArgument)
	assert.Equal(t, "UploadSliceAt", e.Op)
	requireErrKind(t, core.UploadSliceAt(b, h, -1, []uint32{1}), core.ErrInvalidArgument)

	odd, err := b.Alloc(6)
	require.NoError(t, err)
	dst := []uint32{9, 9}
	out, err := core.DownloadSlice(b, odd, dst)
	requireErrKind(t, err, core.ErrInvalidArgument, "6 bytes, not a whole number of 4-byte elements")
	assert.Equal(t, []uint32{9, 9}, out)
	require.NoError(t, b.Free(h))
	out, err = core.DownloadSlice(b, h, dst)
	e = requireErrKind(t, err, core.ErrUnknownHandle)
	assert.Equal(t, "DownloadSlice", e.Op)
	assert.Equal(t, []uint32{9, 9}, out)
}
