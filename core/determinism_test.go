package core_test

import (
	"bytes"
	"math/rand"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// callsProgram runs one fixed program on a fresh simulated device and
// returns the device's call counts: uploads of several sizes (1 MiB among
// them), a packed upload of many buffers, a batch with uploads and reads,
// and single and many reads. Every byte read is checked.
func callsProgram(t *testing.T) map[sim.Op]uint64 {
	t.Helper()
	b, dev := openSim(t, sim.Config{TotalMemory: 256 << 20})
	r := rand.New(rand.NewSource(28))
	var bufs []core.Buffer
	defer func() {
		for _, h := range bufs {
			assert.NoError(t, b.Free(h))
		}
	}()
	want := map[core.Buffer][]byte{}
	for _, n := range []int{1000, 64 << 10, 300 << 10, 1 << 20, 3<<20 + 7, 9 << 20} {
		h, err := core.AllocSlice[float32](b, n/4)
		require.NoError(t, err)
		bufs = append(bufs, h)
		src := make([]float32, n/4)
		for i := range src {
			src[i] = r.Float32()
		}
		require.NoError(t, core.UploadSlice(b, h, src))
		got, err := core.DownloadSlice(b, h, []float32(nil))
		require.NoError(t, err)
		require.Equal(t, src, got)
	}
	var ups []core.UploadAt
	var rds []core.Range
	for i := range 96 {
		h, err := b.Alloc(4<<10 + 16*i)
		require.NoError(t, err)
		bufs = append(bufs, h)
		want[h] = randomBytes(r, h.Len)
		ups = append(ups, core.UploadAt{Buf: h, Data: want[h]})
		rds = append(rds, h.All())
	}
	require.NoError(t, b.Upload(ups...))
	got, err := b.DownloadMany(rds, nil)
	require.NoError(t, err)
	for i, rd := range rds {
		require.True(t, bytes.Equal(want[rd.Buf], got[i]), "read %d", i)
	}
	for i := range ups {
		want[ups[i].Buf] = randomBytes(r, ups[i].Buf.Len)
		ups[i].Data = want[ups[i].Buf]
	}
	got, err = b.Run(core.Batch{Uploads: ups, Reads: rds}, got)
	require.NoError(t, err)
	for i, rd := range rds {
		require.True(t, bytes.Equal(want[rd.Buf], got[i]), "batch read %d", i)
	}
	return dev.CallCounts()
}

// TestSimCallsIndependentOfGOMAXPROCS checks that one program makes the
// same driver calls on the simulated device whatever GOMAXPROCS is, so a
// fault armed at the nth call of an operation hits the same call on every
// machine.
func TestSimCallsIndependentOfGOMAXPROCS(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	var first map[sim.Op]uint64
	for _, procs := range []int{1, 2, 8} {
		runtime.GOMAXPROCS(procs)
		counts := callsProgram(t)
		require.NotZero(t, counts[sim.OpMemcpyHtoDAsync])
		if first == nil {
			first = counts
			continue
		}
		assert.Equal(t, first, counts, "GOMAXPROCS=%d", procs)
	}
}

// TestSimFaultHitsSameCopy counts the host-to-device copies of a 1 MiB
// upload under GOMAXPROCS 1, then under 1, 2 and 8 arms a fault at the last
// of them, which must fail the upload, and one past it, which must not fire.
func TestSimFaultHitsSameCopy(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	src := make([]float32, 1<<18)
	var copies uint64
	for _, procs := range []int{1, 2, 8} {
		runtime.GOMAXPROCS(procs)
		b, dev := openSim(t, sim.Config{})
		h, err := core.AllocSlice[float32](b, len(src))
		require.NoError(t, err)
		if copies == 0 {
			dev.ResetCalls()
			require.NoError(t, core.UploadSlice(b, h, src))
			copies = dev.Calls(sim.OpMemcpyHtoDAsync)
			require.Greater(t, copies, uint64(1), "a 1 MiB upload moves in chunks")
		}
		dev.FailNth(sim.OpMemcpyHtoDAsync, int(copies), cudaapi.CUDA_ERROR_UNKNOWN)
		assert.ErrorIs(t, core.UploadSlice(b, h, src), core.ErrDriver, "GOMAXPROCS=%d", procs)
		dev.ClearFaults()
		dev.FailNth(sim.OpMemcpyHtoDAsync, int(copies)+1, cudaapi.CUDA_ERROR_UNKNOWN)
		require.NoError(t, core.UploadSlice(b, h, src), "GOMAXPROCS=%d", procs)
		dev.ClearFaults()
		require.NoError(t, b.Free(h))
	}
}
