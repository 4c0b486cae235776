//go:build gpu

package core_test

import (
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
)

// BenchmarkGPUGraphFromGoSlices is W8's step (upload n bytes, ScaleF32,
// read n back) from and into Go slices, as Run and as a Graph replay, and
// the replay with the upload alone or the read alone, at 128 KiB to 4 MiB:
//
//	.gpu/core.test -test.run XXX -test.bench GPUGraphFromGoSlices -test.benchtime 400x
func BenchmarkGPUGraphFromGoSlices(b *testing.B) {
	for _, n := range []int{128 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20} {
		for _, form := range []string{"run", "run-read", "replay", "replay-upload", "replay-read"} {
			b.Run(fmt.Sprintf("%dKiB/%s", n>>10, form), func(b *testing.B) {
				be := openBench(b)
				x, err := be.Alloc(n)
				require.NoError(b, err)
				y, err := be.Alloc(n)
				require.NoError(b, err)
				batch := core.Batch{Uploads: []core.UploadAt{{Buf: x, Data: make([]byte, n)}}, Reads: []core.Range{y.All()},
					Steps: []core.Step{{Program: core.ProgramScaleF32(), Bufs: []core.Buffer{x, y},
						Config: core.DispatchConfig{Scalars: []uint32{math.Float32bits(3)}}}}}
				switch form {
				case "replay-upload":
					batch.Reads = nil
				case "run-read", "replay-read":
					batch.Uploads = nil
				}
				dst := [][]byte{make([]byte, 0, n)}
				step := func() error { dst, err = be.Run(batch, dst); return err }
				if !strings.HasPrefix(form, "run") {
					g, err := be.Capture(batch)
					require.NoError(b, err)
					b.Cleanup(func() { require.NoError(b, g.Close()) })
					step = func() error { dst, err = g.Replay(dst); return err }
				}
				for range 20 {
					require.NoError(b, step())
				}
				b.ResetTimer()
				for range b.N {
					if err := step(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// TestGPUGraphFromGoSlices replays W8's step from and into Go slices, its
// upload large enough to be packed on several goroutines and its read
// large enough to land in chunks after each launch, with fresh input at
// every replay, alternating Replay and ReplayAsync, and checks every
// output against the CPU's.
func TestGPUGraphFromGoSlices(t *testing.T) {
	be := dispatchGPU(t)
	r := rand.New(rand.NewSource(27))
	for _, n := range []int{512 << 10, 2 << 20, 4 << 20} {
		x, err := be.Alloc(n)
		require.NoError(t, err)
		y, err := be.Alloc(n)
		require.NoError(t, err)
		in := make([]byte, n)
		batch := core.Batch{Uploads: []core.UploadAt{{Buf: x, Data: in}}, Reads: []core.Range{y.All()},
			Steps: []core.Step{{Program: core.ProgramScaleF32(), Bufs: []core.Buffer{x, y},
				Config: core.DispatchConfig{Scalars: []uint32{math.Float32bits(3)}}}}}
		g, err := be.Capture(batch)
		require.NoError(t, err)
		dst := [][]byte{make([]byte, 0, n)}
		for i := range 6 {
			fillFloats(r, in)
			want := scaled(in)
			if i%3 == 2 {
				pd, err := g.ReplayAsync()
				require.NoError(t, err)
				out, err := pd.AwaitInto(nil)
				require.NoError(t, err)
				require.Equal(t, want, out[0], "%d bytes, ReplayAsync %d", n, i)
				continue
			}
			syncs := be.Telemetry().SyncPoints
			dst, err = g.Replay(dst)
			require.NoError(t, err)
			require.Equal(t, want, dst[0], "%d bytes, Replay %d", n, i)
			if n == 4<<20 {
				assert.Greater(t, be.Telemetry().SyncPoints-syncs, uint64(1), "the 4 MiB read landed in chunks")
			}
		}
		require.NoError(t, g.Close())
		require.NoError(t, be.Free(x))
		require.NoError(t, be.Free(y))
	}
	assert.Zero(t, be.LaunchResourceCounts().Leases)
}
