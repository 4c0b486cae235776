//go:build gpu

package core_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

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
