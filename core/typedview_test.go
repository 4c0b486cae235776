package core_test

import (
	"errors"
	"math"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

func TestAsBytesIsAViewOfTheElements(t *testing.T) {
	s := make([]uint32, 2, 5)
	s[0], s[1] = 0x04030201, 0x08070605
	v := core.AsBytes(s)
	assert.Equal(t, []byte{1, 2, 3, 4, 5, 6, 7, 8}, v, "little-endian element bytes")
	assert.Equal(t, 20, cap(v), "the capacity covers the elements' capacity")
	assert.Equal(t, unsafe.Pointer(unsafe.SliceData(s)), unsafe.Pointer(unsafe.SliceData(v)), "no copy")
	v[0] = 0xff
	assert.Equal(t, uint32(0x040302ff), s[0], "writes through the view reach the elements")

	assert.Nil(t, core.AsBytes[float64](nil))
	assert.Nil(t, core.AsBytes([]int16{}))
	assert.Len(t, core.AsBytes(make([]complex128, 0, 1)), 0)
	assert.Len(t, core.AsBytes([]complex128{1i}), 16)
}

func TestAsBytesCarriesTypedDataThroughABatch(t *testing.T) {
	b, _ := openSim(t, sim.Config{})
	x := []uint32{1, 2, 3, 4}
	y := []uint32{10, 20, 30, 40}
	var bufs [3]core.Buffer
	for i := range bufs {
		var err error
		bufs[i], err = core.AllocSlice[uint32](b, len(x))
		require.NoError(t, err)
	}
	sum := make([]uint32, len(x))
	out, err := b.Run(core.Batch{
		Uploads: []core.UploadAt{{Buf: bufs[0], Data: core.AsBytes(x)}, {Buf: bufs[1], Data: core.AsBytes(y)}},
		Steps:   []core.Step{{Program: core.ProgramVAddU32(), Bufs: bufs[:]}},
		Reads:   []core.Range{bufs[2].All()},
	}, [][]byte{core.AsBytes(sum)[:0]})
	require.NoError(t, err)
	assert.Equal(t, []uint32{11, 22, 33, 44}, sum, "the read landed in the typed slice's storage")
	assert.Equal(t, unsafe.Pointer(unsafe.SliceData(sum)), unsafe.Pointer(unsafe.SliceData(out[0])))
}

// fakeMem is a KernelMemory over one host slice that starts at device
// address base; short makes Bytes return fewer bytes than asked, shift
// makes it return them one byte off their alignment.
type fakeMem struct {
	base  uint64
	mem   []byte
	short bool
	shift bool
}

func (m *fakeMem) Bytes(ptr uint64, n int) ([]byte, error) {
	if ptr < m.base || ptr-m.base+uint64(n) > uint64(len(m.mem)) {
		return nil, errors.New("out of range")
	}
	off := int(ptr - m.base)
	switch {
	case m.short:
		return m.mem[off : off+n-1], nil
	case m.shift:
		return m.mem[off+1 : off+1+n], nil
	}
	return m.mem[off : off+n], nil
}

func TestKernelSliceViewsKernelMemory(t *testing.T) {
	backing := make([]float64, 8) // 8-byte aligned host storage
	m := &fakeMem{base: 0x1000, mem: core.AsBytes(backing)}
	s, err := core.KernelSlice[float64](m, core.KernelArg{Ptr: 0x1008, IsPtr: true}, 3)
	require.NoError(t, err)
	require.Len(t, s, 3)
	s[0], s[2] = 1.5, -2
	assert.Equal(t, []float64{0, 1.5, 0, -2, 0, 0, 0, 0}, backing, "the slice aliases the memory at the address")

	empty, err := core.KernelSlice[int32](m, core.KernelArg{Ptr: 0x1000, IsPtr: true}, 0)
	require.NoError(t, err)
	assert.Empty(t, empty)
	assert.NotNil(t, empty)
}

func TestKernelSliceRefusesWithoutPanicking(t *testing.T) {
	backing := make([]uint64, 4)
	ok := &fakeMem{base: 0x1000, mem: core.AsBytes(backing)}
	ptr := core.KernelArg{Ptr: 0x1000, IsPtr: true}
	cases := []struct {
		name  string
		call  func() error
		parts []string
	}{
		{"nil memory", func() error { _, err := core.KernelSlice[uint32](nil, ptr, 1); return err }, []string{"KernelMemory is nil"}},
		{"scalar", func() error {
			_, err := core.KernelSlice[uint32](ok, core.KernelArg{U32: 7}, 1)
			return err
		}, []string{"scalar", "0x7"}},
		{"negative", func() error { _, err := core.KernelSlice[uint32](ok, ptr, -1); return err }, []string{"-1 elements of 4 bytes"}},
		{"overflow", func() error { _, err := core.KernelSlice[uint64](ok, ptr, math.MaxInt/4); return err }, []string{"of 8 bytes"}},
		{"misaligned address", func() error {
			_, err := core.KernelSlice[uint32](ok, core.KernelArg{Ptr: 0x1002, IsPtr: true}, 1)
			return err
		}, []string{"0x1002", "multiple of 4"}},
		{"past the end", func() error { _, err := core.KernelSlice[uint64](ok, ptr, 5); return err }, []string{"5 elements of 8 bytes at 0x1000", "out of range"}},
		{"short answer", func() error {
			_, err := core.KernelSlice[uint64](&fakeMem{base: 0x1000, mem: ok.mem, short: true}, ptr, 2)
			return err
		}, []string{"15 bytes", "want 16 bytes"}},
		{"misaligned host memory", func() error {
			_, err := core.KernelSlice[uint32](&fakeMem{base: 0x1000, mem: ok.mem, shift: true}, ptr, 2)
			return err
		}, []string{"aligned to 4"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var err error
			require.NotPanics(t, func() { err = c.call() })
			e := requireErrKind(t, err, core.ErrInvalidArgument, c.parts...)
			assert.Equal(t, "KernelSlice", e.Op)
		})
	}
	assert.Equal(t, []uint64{0, 0, 0, 0}, backing, "refusals write nothing")
}

// TestKernelSliceInATwinOnSim runs a compiled program whose twin reads and
// writes through KernelSlice, and one whose twin asks for more elements
// than its buffer holds: the launch fails with the refusal's text.
func TestKernelSliceInATwinOnSim(t *testing.T) {
	b, _ := openSim(t, sim.Config{})
	twin := func(extra int) core.HostKernel {
		return func(mem core.KernelMemory, _ core.LaunchConfig, args []core.KernelArg) error {
			n := int(args[2].Uint32()) + extra
			y, err := core.KernelSlice[float32](mem, args[0], n)
			if err != nil {
				return err
			}
			x, err := core.KernelSlice[float32](mem, args[1], n)
			if err != nil {
				return err
			}
			for i := range y {
				y[i] += x[i]
			}
			return nil
		}
	}
	params := []core.ParamType{core.ParamBuffer, core.ParamBuffer, core.ParamUint32}
	const src = `extern "C" __global__ void add(float *y, const float *x, unsigned int n) {}`
	good, err := b.Compile(core.CompileSpec{Source: src, Entry: "add", Params: params, Grid: core.GridRule{Blocks: 1}, Host: twin(0)})
	require.NoError(t, err)
	bad, err := b.Compile(core.CompileSpec{Source: src + " ", Entry: "add", Params: params, Grid: core.GridRule{Blocks: 1}, Host: twin(1)})
	require.NoError(t, err)

	xs, err := core.AllocSlice[float32](b, 3)
	require.NoError(t, err)
	ys, err := core.AllocSlice[float32](b, 3)
	require.NoError(t, err)
	require.NoError(t, core.UploadSlice(b, xs, []float32{1, 2, 3}))
	require.NoError(t, core.UploadSlice(b, ys, []float32{10, 20, 30}))
	args := []core.Arg{core.ArgBuffer(ys), core.ArgBuffer(xs), core.ArgUint32(3)}
	require.NoError(t, b.Dispatch(good, nil, core.DispatchConfig{Args: args}))
	got, err := core.DownloadSlice[float32](b, ys, nil)
	require.NoError(t, err)
	assert.Equal(t, []float32{11, 22, 33}, got)

	err = b.Dispatch(bad, nil, core.DispatchConfig{Args: args})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "KernelSlice")
	assert.Contains(t, err.Error(), "4 elements of 4 bytes")
}
