package core_test

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// finiteF32 returns a random finite float32 spread over many magnitudes.
func finiteF32(r *rand.Rand) float32 {
	for {
		f := math.Float32frombits(r.Uint32())
		if !math.IsNaN(float64(f)) && !math.IsInf(float64(f), 0) {
			return f
		}
	}
}

// builtinCase runs one built-in over random inputs and says what a plain Go
// loop expects in each buffer afterwards.
type builtinCase struct {
	name    string
	program func() *core.Program
	// setup returns the buffers' initial words, the scalars, and the
	// expected words of every buffer after the launch.
	setup func(r *rand.Rand, n int) (in [][]uint32, scalars []uint32, want [][]uint32)
}

func randomWords(r *rand.Rand, n int) []uint32 {
	w := make([]uint32, n)
	for i := range w {
		w[i] = r.Uint32()
	}
	return w
}

func builtinCases() []builtinCase {
	return []builtinCase{
		{"fill", core.ProgramFillU32, func(r *rand.Rand, n int) ([][]uint32, []uint32, [][]uint32) {
			dst, v := randomWords(r, n), r.Uint32()
			want := make([]uint32, n)
			for i := range want {
				want[i] = v
			}
			return [][]uint32{dst}, []uint32{v}, [][]uint32{want}
		}},
		{"copy", core.ProgramCopyU32, func(r *rand.Rand, n int) ([][]uint32, []uint32, [][]uint32) {
			src, dst := randomWords(r, n), randomWords(r, n)
			want := make([]uint32, n)
			for i := range want {
				want[i] = src[i]
			}
			return [][]uint32{src, dst}, nil, [][]uint32{src, want}
		}},
		{"vadd", core.ProgramVAddU32, func(r *rand.Rand, n int) ([][]uint32, []uint32, [][]uint32) {
			a, b, out := randomWords(r, n), randomWords(r, n), randomWords(r, n)
			want := make([]uint32, n)
			for i := range want {
				want[i] = a[i] + b[i]
			}
			return [][]uint32{a, b, out}, nil, [][]uint32{a, b, want}
		}},
		{"scale", core.ProgramScaleF32, func(r *rand.Rand, n int) ([][]uint32, []uint32, [][]uint32) {
			x, out := make([]uint32, n), randomWords(r, n)
			factor := finiteF32(r)
			want := make([]uint32, n)
			for i := range x {
				v := finiteF32(r)
				x[i] = math.Float32bits(v)
				want[i] = math.Float32bits(v * factor)
			}
			return [][]uint32{x, out}, []uint32{math.Float32bits(factor)}, [][]uint32{x, want}
		}},
	}
}

func TestBuiltinTwinsMatchPlainLoops(t *testing.T) {
	for _, bc := range builtinCases() {
		for _, n := range []int{1, 3, 255, 256, 257, 4099} {
			t.Run(fmt.Sprintf("%s/n=%d", bc.name, n), func(t *testing.T) {
				b, dev := openSim(t, sim.Config{})
				r := rand.New(rand.NewSource(int64(n)))
				in, scalars, want := bc.setup(r, n)
				bufs := make([]core.Buffer, len(in))
				for i, w := range in {
					bufs[i] = residentWith(t, b, u32s(w...))
				}
				require.NoError(t, b.Dispatch(bc.program(), bufs, core.DispatchConfig{Scalars: scalars}))
				for i, h := range bufs {
					assert.Equal(t, want[i], words(deviceBytes(t, b, dev, h)), "n=%d buffer %d", n, i)
				}
			})
		}
	}
}

func TestBuiltinsTouchOnlyWholeElements(t *testing.T) {
	// A 10-byte buffer holds two whole words; the trailing two bytes stay.
	b, dev := openSim(t, sim.Config{})
	h := residentWith(t, b, []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
	require.NoError(t, b.Dispatch(core.ProgramFillU32(), []core.Buffer{h}, core.DispatchConfig{Scalars: []uint32{0xAABBCCDD}}))
	assert.Equal(t, []byte{0xDD, 0xCC, 0xBB, 0xAA, 0xDD, 0xCC, 0xBB, 0xAA, 9, 10}, deviceBytes(t, b, dev, h))
}

func TestBuiltinsInPlace(t *testing.T) {
	b, dev := openSim(t, sim.Config{})
	h := residentWith(t, b, u32s(1, 2, 3))
	require.NoError(t, b.Dispatch(core.ProgramVAddU32(), []core.Buffer{h, h, h}, core.DispatchConfig{}))
	assert.Equal(t, []uint32{2, 4, 6}, words(deviceBytes(t, b, dev, h)))
	require.NoError(t, b.Dispatch(core.ProgramScaleF32(), []core.Buffer{h, h},
		core.DispatchConfig{Scalars: []uint32{math.Float32bits(1)}}))
	assert.Equal(t, []uint32{2, 4, 6}, words(deviceBytes(t, b, dev, h)), "scaling denormal bit patterns by 1 keeps them")
}

func TestBuiltinProgramsAreSharedSingletons(t *testing.T) {
	assert.Same(t, core.ProgramVAddU32(), core.ProgramVAddU32())
	for _, p := range []*core.Program{core.ProgramFillU32(), core.ProgramCopyU32(), core.ProgramVAddU32(), core.ProgramScaleF32()} {
		s := p.Spec()
		assert.True(t, s.Count, p.Name())
		assert.Equal(t, 4, s.Grid.ElemSize, p.Name())
		assert.NotNil(t, s.Host, p.Name())
	}
}
