package core_test

import (
	"bytes"
	"fmt"
	"math/rand"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
	"github.com/vyre-go/vyrecuda/xferplan"
)

// partsRig is a simulated Backend whose readbacks of two or more buffers
// are packed in a fixed number of parts, holding n buffers of random sizes
// and contents.
type partsRig struct {
	dev  *sim.Device
	b    *core.Backend
	hs   []core.Buffer
	want [][]byte
}

func newPartsRig(t *testing.T, r *rand.Rand, n, parts, workers int, opts ...core.Option) *partsRig {
	t.Helper()
	g := &partsRig{dev: sim.New(sim.Config{TotalMemory: 1 << 30})}
	opts = append([]core.Option{core.WithLogger(quietLogger), core.WithPlanTuning(xferplan.Tuning{
		Only: xferplan.Kinds(xferplan.Packed), PackMinCopies: 2, PackParts: parts, MaxWorkers: workers, WorkerBytes: 64})}, opts...)
	b, err := core.Open(g.dev, opts...)
	require.NoError(t, err)
	g.b = b
	t.Cleanup(func() {
		g.dev.ClearFaults()
		require.NoError(t, b.Close())
		assert.True(t, g.dev.Live().Zero(), "device holds %+v after Close", g.dev.Live())
	})
	for range n {
		data := make([]byte, 1+r.Intn(3000))
		r.Read(data)
		h, err := b.Alloc(len(data))
		require.NoError(t, err)
		require.NoError(t, b.Upload(core.UploadAt{Buf: h, Data: data}))
		g.hs, g.want = append(g.hs, h), append(g.want, data)
	}
	return g
}

// TestPackedReadbackInParts: readbacks of many buffers packed in several
// parts (more parts than the events a readback rotates through, too) give
// every caller exactly its bytes through each readback call, move one DMA
// per part (after the table's, unless the gather reads the table from
// pinned memory), and count each part's landing as a sync point.
func TestPackedReadbackInParts(t *testing.T) {
	for _, mode := range tableModes {
		for _, parts := range []int{2, 3, 11} {
			for _, workers := range []int{1, 4} {
				t.Run(fmt.Sprintf("%s/parts%d/workers%d", mode.name, parts, workers), func(t *testing.T) {
					packedReadbackInParts(t, parts, workers, mode.opt)
				})
			}
		}
	}
}

// packedReadbackInParts is one case of TestPackedReadbackInParts.
func packedReadbackInParts(t *testing.T, parts, workers int, opt core.Option) {
	r := rand.New(rand.NewSource(int64(parts*10 + workers)))
	g := newPartsRig(t, r, 24, parts, workers, opt)
	tableDMAs := uint64(0)
	if opt != nil {
		tableDMAs = 1
	}
	dst := make([][]byte, len(g.hs))
	for i := range dst {
		if i%3 != 0 {
			dst[i] = make([]byte, 0, len(g.want[i])+r.Intn(2))
		}
	}
	tel0, dmas0, ups0 := g.b.Telemetry(), g.dev.Calls(sim.OpMemcpyDtoHAsync), g.dev.Calls(sim.OpMemcpyHtoDAsync)
	out, err := g.b.DownloadMany(allOf(g.hs), dst)
	require.NoError(t, err)
	tel := g.b.Telemetry()
	// At most parts: a part boundary that falls inside the piece of the
	// one before it merges the two (24 pieces of random sizes).
	moved := g.dev.Calls(sim.OpMemcpyDtoHAsync) - dmas0
	assert.LessOrEqual(t, moved, uint64(parts), "DMAs of the pieces")
	assert.GreaterOrEqual(t, moved, uint64(parts)*3/4, "DMAs of the pieces")
	if parts > 8 {
		assert.Greater(t, moved, uint64(8), "more parts than the events a readback rotates through")
	}
	assert.Equal(t, tableDMAs, g.dev.Calls(sim.OpMemcpyHtoDAsync)-ups0, "DMAs of the table")
	assert.Equal(t, moved+tableDMAs, tel.DeviceCopies-tel0.DeviceCopies, "device copies: table and parts")
	assert.Equal(t, moved, tel.SyncPoints-tel0.SyncPoints, "sync points: each part's landing")
	for i := range g.hs {
		require.True(t, bytes.Equal(g.want[i], out[i]), "slot %d", i)
		if dst[i] != nil {
			assert.Equal(t, unsafe.SliceData(dst[i]), unsafe.SliceData(out[i]), "slot %d storage reused", i)
		}
	}

	many, err := g.b.DownloadMany(allOf(g.hs), nil)
	require.NoError(t, err)
	for i := range g.hs {
		require.True(t, bytes.Equal(g.want[i], many[i]), "DownloadMany %d", i)
	}

	// Overlapping ranges, out of order: requests share fused copies.
	var rs []core.Range
	for i := len(g.hs) - 1; i >= 0; i-- {
		n := len(g.want[i])
		rs = append(rs, core.Range{Buf: g.hs[i], Offset: n / 3, Len: n - n/3}, core.Range{Buf: g.hs[i], Len: n / 2})
	}
	got, err := g.b.DownloadMany(rs, nil)
	require.NoError(t, err)
	for k, x := range rs {
		require.True(t, bytes.Equal(g.want[indexOf(g.hs, x.Buf)][x.Offset:x.Offset+x.Len], got[k]), "range %d", k)
	}

	into, err := g.b.DownloadMany(rs, make([][]byte, 0, len(rs)))
	require.NoError(t, err)
	require.Len(t, into, len(rs))
	for k, x := range rs {
		require.True(t, bytes.Equal(g.want[indexOf(g.hs, x.Buf)][x.Offset:x.Offset+x.Len], into[k]), "range %d into slots", k)
	}
}

// TestPackedReadbackInPartsFailure: when the device fails after some parts
// landed, the call fails with a *core.Error, every slot header stays as it
// was, each slot's storage holds either what it held or all of its
// buffer's bytes, nothing leaks (the rig's cleanup checks the device), and
// the Backend then reads correctly.
func TestPackedReadbackInPartsFailure(t *testing.T) {
	faults := []struct {
		op  sim.Op
		nth int
	}{{sim.OpEventQuery, 1}, {sim.OpEventQuery, 2}, {sim.OpEventQuery, 6}, {sim.OpEventRecord, 3},
		{sim.OpMemcpyDtoHAsync, 2}, {sim.OpMemcpyDtoHAsync, 10}}
	for _, f := range faults {
		for _, workers := range []int{1, 4} {
			t.Run(fmt.Sprintf("%v#%d/workers%d", f.op, f.nth, workers), func(t *testing.T) {
				r := rand.New(rand.NewSource(int64(f.nth*7 + workers)))
				g := newPartsRig(t, r, 30, 11, workers)
				dst := make([][]byte, len(g.hs))
				prior := make([][]byte, len(g.hs))
				for i := range dst {
					dst[i] = make([]byte, 1, len(g.want[i]))
					full := dst[i][:cap(dst[i])]
					for k := range full {
						full[k] = 0x5a
					}
					prior[i] = bytes.Clone(full)
				}
				headers := append([][]byte(nil), dst...)
				g.dev.FailNth(f.op, f.nth, cudaapi.CUDA_ERROR_UNKNOWN)
				out, err := g.b.DownloadMany(allOf(g.hs), dst)
				var ce *core.Error
				require.ErrorAs(t, err, &ce)
				assert.Equal(t, "DownloadMany", ce.Op)
				assert.Equal(t, unsafe.SliceData(dst), unsafe.SliceData(out))
				for i := range dst {
					require.Equal(t, headers[i], dst[i][:len(headers[i]):cap(headers[i])], "slot %d header", i)
					require.Len(t, dst[i], 1, "slot %d length", i)
					full := dst[i][:cap(dst[i])]
					require.True(t, bytes.Equal(full, prior[i]) || bytes.Equal(full, g.want[i]),
						"slot %d holds neither its old bytes nor its buffer's", i)
				}
				g.dev.ClearFaults()
				out, err = g.b.DownloadMany(allOf(g.hs), dst)
				require.NoError(t, err)
				for i := range g.hs {
					require.True(t, bytes.Equal(g.want[i], out[i]), "slot %d after the failure", i)
				}
			})
		}
	}
}

// TestAtomicReadbacksLandWhole: under WithAtomicReadbacks the readbacks
// that would move in parts, in chunks or straight into pinned memory land
// whole in staging first, so a failure at their one fence leaves every
// byte of the caller's storage as it was.
func TestAtomicReadbacksLandWhole(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	g := newPartsRig(t, r, 12, 5, 4, core.WithAtomicReadbacks(true))
	dmas0 := g.dev.Calls(sim.OpMemcpyDtoHAsync)
	out, err := g.b.DownloadMany(allOf(g.hs), nil)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), g.dev.Calls(sim.OpMemcpyDtoHAsync)-dmas0, "one DMA of the pieces")
	for i := range g.hs {
		require.True(t, bytes.Equal(g.want[i], out[i]), "slot %d", i)
	}

	dst := make([][]byte, len(g.hs))
	for i := range dst {
		dst[i] = make([]byte, len(g.want[i]))
	}
	g.dev.FailNth(sim.OpStreamSynchronize, 1, cudaapi.CUDA_ERROR_UNKNOWN)
	_, err = g.b.DownloadMany(allOf(g.hs), dst)
	require.Error(t, err)
	for i := range dst {
		require.True(t, bytes.Equal(dst[i], make([]byte, len(dst[i]))), "slot %d changed", i)
	}
	g.dev.ClearFaults()

	// A single large read is not staged in chunks either (without the
	// option the same tuning stages it).
	for _, atomic := range []bool{false, true} {
		staged := newPartsRig(t, r, 0, 1, 4, core.WithAtomicReadbacks(atomic),
			core.WithPlanTuning(xferplan.Tuning{Only: xferplan.Kinds(xferplan.Staged), StageMin: 64, MinChunk: 256, MaxChunk: 256}))
		data := make([]byte, 2000)
		r.Read(data)
		h, err := staged.b.Alloc(len(data))
		require.NoError(t, err)
		require.NoError(t, staged.b.Upload(core.UploadAt{Buf: h, Data: data}))
		dmas0 = staged.dev.Calls(sim.OpMemcpyDtoHAsync)
		one, err := staged.b.Download(h.All(), nil)
		require.NoError(t, err)
		assert.True(t, bytes.Equal(data, one))
		if atomic {
			assert.Equal(t, uint64(1), staged.dev.Calls(sim.OpMemcpyDtoHAsync)-dmas0, "one DMA")
		} else {
			assert.Greater(t, staged.dev.Calls(sim.OpMemcpyDtoHAsync)-dmas0, uint64(1), "chunks")
		}
	}
}

// TestDownloadManyResultsAreIndependent: the new slices
// DownloadMany returns, whatever the plan (one DMA or parts, one
// copy goroutine or several) and with a buffer named twice, each hold
// their buffer's bytes with capacity equal to their length, so writing or
// appending to one changes no other.
func TestDownloadManyResultsAreIndependent(t *testing.T) {
	for _, parts := range []int{1, 3} {
		for _, workers := range []int{1, 4} {
			t.Run(fmt.Sprintf("parts%d/workers%d", parts, workers), func(t *testing.T) {
				r := rand.New(rand.NewSource(int64(parts*10 + workers)))
				g := newPartsRig(t, r, 40, parts, workers)
				hs := append(append([]core.Buffer(nil), g.hs...), g.hs[3], g.hs[0])
				want := append(append([][]byte(nil), g.want...), g.want[3], g.want[0])
				got, err := g.b.DownloadMany(allOf(hs), nil)
				require.NoError(t, err)
				require.Len(t, got, len(hs))
				for i := range hs {
					require.True(t, bytes.Equal(want[i], got[i]), "result %d", i)
					require.Equal(t, len(got[i]), cap(got[i]), "result %d's capacity", i)
				}
				for i := range got {
					for k := range got[i] {
						got[i][k] = ^want[i][k]
					}
					grown := append(got[i], 0xEE, 0xEE)
					for j := range got {
						if j > i {
							require.True(t, bytes.Equal(want[j], got[j]), "result %d after writing result %d", j, i)
						}
					}
					require.Equal(t, byte(0xEE), grown[len(grown)-1])
				}
			})
		}
	}
}
