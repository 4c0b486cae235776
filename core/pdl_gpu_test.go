//go:build gpu

// GPU test of programmatic dependent launch: a chain of dependent built-in
// steps over buffers of many blocks, run and replayed from a graph with
// programmatic launch on and off, against the simulated device:
//
//	.gpu/core.test -test.run 'GPUGraphProgrammatic' -test.v

package core_test

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// pdlChain is 100 dependent steps of every built-in but scale over four
// buffers of 64 Ki words (256 blocks per launch), so a step that read its
// inputs before the step ahead of it had written them would show.
type pdlChain struct {
	x, y, z, w core.Buffer
	in         [2][]byte
	batch      core.Batch
}

func newPDLChain(t *testing.T, b *core.Backend) *pdlChain {
	t.Helper()
	const n = 1 << 18 // bytes
	c := &pdlChain{in: [2][]byte{make([]byte, n), make([]byte, n)}}
	for _, p := range []*core.Buffer{&c.x, &c.y, &c.z, &c.w} {
		h, err := b.Alloc(n)
		require.NoError(t, err)
		*p = h
	}
	var steps []core.Step
	for k := range 25 {
		steps = append(steps,
			core.Step{Program: core.ProgramVAddU32(), Bufs: []core.Buffer{c.x, c.y, c.z}},
			core.Step{Program: core.ProgramFillU32(), Bufs: []core.Buffer{c.w}, Config: core.DispatchConfig{Scalars: []uint32{uint32(k)}}},
			core.Step{Program: core.ProgramVAddU32(), Bufs: []core.Buffer{c.z, c.w, c.x}},
			core.Step{Program: core.ProgramCopyU32(), Bufs: []core.Buffer{c.x, c.y}})
	}
	c.batch = core.Batch{Uploads: []core.UploadAt{{Buf: c.x, Data: c.in[0]}, {Buf: c.y, Data: c.in[1]}}, Steps: steps,
		Reads: []core.Range{{Buf: c.x, Len: n}, {Buf: c.y, Len: n}, {Buf: c.z, Len: n}, {Buf: c.w, Len: n}}}
	return c
}

func (c *pdlChain) free(t *testing.T, b *core.Backend) {
	t.Helper()
	for _, h := range []core.Buffer{c.x, c.y, c.z, c.w} {
		require.NoError(t, b.Free(h))
	}
}

func TestGPUGraphProgrammaticLaunchMatchesSim(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("pdl=%v", on), func(t *testing.T) {
			gpu, err := core.OpenCUDA(0, core.WithProgrammaticLaunch(on))
			require.NoError(t, err)
			t.Cleanup(func() { assert.NoError(t, gpu.Close()) })
			info := gpu.DeviceInfo()
			use := on && info.CCMajor >= 9 && gpu.Capabilities().ProgrammaticLaunch
			require.Equal(t, use, gpu.ProgrammaticLaunch())
			t.Logf("%s, compute capability %d.%d, %s: programmatic launch %v",
				info.Name, info.CCMajor, info.CCMinor, gpu.Capabilities(), gpu.ProgrammaticLaunch())
			simB, _ := openSim(t, sim.Config{})
			gc, sc := newPDLChain(t, gpu), newPDLChain(t, simB)
			r := rand.New(rand.NewSource(90))
			next := func() {
				for k := range gc.in {
					r.Read(gc.in[k])
					copy(sc.in[k], gc.in[k])
				}
			}
			for i := range 5 {
				next()
				got, err := gpu.Run(gc.batch, nil)
				require.NoError(t, err)
				want, err := simB.Run(sc.batch, nil)
				require.NoError(t, err)
				require.Equal(t, want, got, "run %d", i)
			}
			g, err := gpu.Capture(gc.batch)
			require.NoError(t, err)
			var got, want [][]byte
			for i := range 20 {
				next()
				got, err = g.Replay(got[:0])
				require.NoError(t, err)
				want, err = simB.Run(sc.batch, want[:0])
				require.NoError(t, err)
				require.Equal(t, want, got, "replay %d", i)
			}
			require.NoError(t, g.Close())
			gc.free(t, gpu)
			sc.free(t, simB)
		})
	}
}
