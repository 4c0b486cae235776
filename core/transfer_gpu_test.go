//go:build gpu

// The transfer paths on a real GPU: correctness with random bytes for the
// packed and pipelined paths against the plain ones, and the W1, W2, W3, W6
// benchmarks with each path side by side. Run on a GPU machine:
//
//	.gpu/core.test -test.run 'GPUTransfer' -test.bench 'GPUW[1236].*(4K|Paths)' -test.benchtime 20x

package core_test

import (
	"bytes"
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
)

func openXferGPU(tb testing.TB, opt core.Option) *core.Backend {
	tb.Helper()
	be, err := core.OpenCUDA(0, opt)
	require.NoError(tb, err, "OpenCUDA")
	tb.Cleanup(func() {
		if err := be.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return be
}

func openXferGPUBench(b *testing.B, opt core.Option) *core.Backend { return openXferGPU(b, opt) }

// TestGPUTransferPackedMatchesPlain uploads and reads random batches (odd
// lengths, odd offsets, overlaps) through the packed path and checks every
// byte against what the per-copy path reads back, and the other way round.
func TestGPUTransferPackedMatchesPlain(t *testing.T) {
	packed := openXferGPU(t, nil)
	plain := openXferGPU(t, core.WithTransferTuning(core.TransferTuning{PackMinCopies: -1}))
	r := rand.New(rand.NewSource(1))
	lens := []int{4096, 1, 17, 4095, 65536, 300, 16}
	for _, writer := range []*core.Backend{packed, plain} {
		reader := packed
		if writer == packed {
			reader = plain
		}
		wb := make([]core.Buffer, 256)
		rb := make([]core.Buffer, len(wb))
		want := make([][]byte, len(wb))
		for i := range wb {
			n := lens[i%len(lens)]
			var err error
			wb[i], err = writer.Alloc(n)
			require.NoError(t, err)
			rb[i], err = reader.Alloc(n)
			require.NoError(t, err)
			want[i] = make([]byte, n)
			r.Read(want[i])
		}
		var ups []core.UploadAt
		for i, h := range wb {
			ups = append(ups, core.UploadAt{Buf: h, Data: want[i]})
		}
		for i := 0; i < 64; i++ {
			k := r.Intn(len(wb))
			off := r.Intn(wb[k].Len)
			d := make([]byte, r.Intn(wb[k].Len-off+1))
			r.Read(d)
			ups = append(ups, core.UploadAt{Buf: wb[k], Offset: off, Data: d})
			copy(want[k][off:], d)
		}
		require.NoError(t, writer.Upload(ups...))
		got, err := writer.DownloadMany(allOf(wb), nil)
		require.NoError(t, err)
		for i := range got {
			require.True(t, bytes.Equal(want[i], got[i]), "writer read back buffer %d", i)
		}
		// Round trip through the other Backend's path.
		var cross []core.UploadAt
		for i, h := range rb {
			cross = append(cross, core.UploadAt{Buf: h, Data: got[i]})
		}
		require.NoError(t, reader.Upload(cross...))
		var rs []core.Range
		for _, h := range rb {
			rs = append(rs, core.Range{Buf: h, Offset: h.Len / 3, Len: h.Len - h.Len/3}, core.Range{Buf: h, Len: h.Len / 2})
		}
		back, err := reader.DownloadMany(rs, nil)
		require.NoError(t, err)
		for j, rg := range rs {
			i := j / 2
			require.True(t, bytes.Equal(want[i][rg.Offset:rg.Offset+rg.Len], back[j]), "range %d", j)
		}
		for i := range wb {
			require.NoError(t, writer.Free(wb[i]))
			require.NoError(t, reader.Free(rb[i]))
		}
	}
	assert.NotZero(t, packed.Telemetry().PackedLaunches, "the packed Backend took the packed path")
	assert.Zero(t, plain.Telemetry().PackedLaunches)
}

// TestGPUTransferPipelinedMatchesPlain moves 72 MiB + 123 bytes (past the
// 64 MiB threshold, with a partial last chunk) through the pipeline both
// ways and checks every byte.
func TestGPUTransferPipelinedMatchesPlain(t *testing.T) {
	piped := openXferGPU(t, nil)
	r := rand.New(rand.NewSource(2))
	const n = 72<<20 + 123
	want := make([]byte, n)
	r.Read(want)
	h, err := piped.Alloc(n)
	require.NoError(t, err)
	defer func() { require.NoError(t, piped.Free(h)) }()
	piped.ResetTelemetry()
	require.NoError(t, piped.Upload(core.UploadAt{Buf: h, Data: want}))
	assert.Greater(t, piped.Telemetry().DeviceCopies, uint64(1), "uploaded in chunks")
	got, err := piped.Download(h.All(), nil)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "download")
	into, err := piped.Download(h.All(), make([]byte, 0, n+10))
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, into), "download into")
	part, err := piped.Download(h.Slice(1000, n-2000), nil)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want[1000:n-1000], part), "range")
	// At an offset, read back by the per-copy path of small ranges.
	patch := make([]byte, 20<<20)
	r.Read(patch)
	require.NoError(t, piped.Upload(core.UploadAt{Buf: h, Offset: 777, Data: patch}))
	copy(want[777:], patch)
	var rs []core.Range
	for off := 0; off < n; off += n / 7 {
		rs = append(rs, core.Range{Buf: h, Offset: off, Len: min(4096, n-off)})
	}
	back, err := piped.DownloadMany(rs, nil)
	require.NoError(t, err)
	for i, rg := range rs {
		require.True(t, bytes.Equal(want[rg.Offset:rg.Offset+rg.Len], back[i]), fmt.Sprint("range ", i))
	}
}

// W1 and W3 compare the packed path with one driver copy per buffer; W2 and
// W6 compare the pipeline with one whole staging block (parallel copy, and
// one thread as before). BenchmarkGPUW2Upload256MiB and
// BenchmarkGPUW6Download256MiB (default paths only) live in
// cuda_bench_gpu_test.go, hence the Paths suffix here.
func BenchmarkGPUW1UploadMany1024x4K(b *testing.B)   { benchW1(b, openXferGPUBench) }
func BenchmarkGPUW3DownloadMany1024x4K(b *testing.B) { benchW3(b, openXferGPUBench) }
func BenchmarkGPUW2Upload256MiBPaths(b *testing.B)   { benchW2(b, openXferGPUBench) }
func BenchmarkGPUW6Download256MiBPaths(b *testing.B) { benchW6(b, openXferGPUBench) }

// The phase breakdowns of W1 and W3 on the GPU, per tuning variant.
func BenchmarkGPUW1Phases(b *testing.B) { benchPhases(b, openXferGPUBench, false) }
func BenchmarkGPUW3Phases(b *testing.B) { benchPhases(b, openXferGPUBench, true) }

// The phase breakdowns of W7's halves on the GPU.
func BenchmarkGPUW7UPhases(b *testing.B) {
	benchPhasesOf(b, openXferGPUBench, false, mixedVariants, mixedSizes())
}
func BenchmarkGPUW7DPhases(b *testing.B) {
	benchPhasesOf(b, openXferGPUBench, true, mixedVariants, mixedSizes())
}

// TestGPUTransferPackedReadbackInParts reads W7's 2048 buffers (16 B-256
// KiB, log-uniform, 52.9 MiB) of random bytes back with the default plan
// (a packed readback in parts, each copied out as it lands), with a fixed
// odd number of parts, and as overlapping ranges out of order, and under
// WithAtomicReadbacks, checking every byte.
func TestGPUTransferPackedReadbackInParts(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	sizes := mixedSizes()
	variants := []struct {
		name string
		opt  core.Option
	}{
		{"default", nil},
		{"parts13", core.WithTransferTuning(core.TransferTuning{PackParts: 13})},
		{"atomic", core.WithAtomicReadbacks(true)},
		{"table-dma", core.WithTableDMA()},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			be := openXferGPU(t, v.opt)
			hs := make([]core.Buffer, len(sizes))
			want := make([][]byte, len(sizes))
			ups := make([]core.UploadAt, len(sizes))
			for i, n := range sizes {
				var err error
				hs[i], err = be.Alloc(n)
				require.NoError(t, err)
				want[i] = make([]byte, n)
				r.Read(want[i])
				ups[i] = core.UploadAt{Buf: hs[i], Data: want[i]}
			}
			require.NoError(t, be.Upload(ups...))
			tel0 := be.Telemetry()
			dst := make([][]byte, len(hs))
			for i := range dst {
				if i%2 == 0 {
					dst[i] = make([]byte, 0, sizes[i])
				}
			}
			got, err := be.DownloadMany(allOf(hs), dst)
			require.NoError(t, err)
			for i := range hs {
				require.True(t, bytes.Equal(want[i], got[i]), "buffer %d", i)
			}
			copies := be.Telemetry().DeviceCopies - tel0.DeviceCopies
			table := uint64(1) // the table's DMA, unless the gather reads it from pinned memory
			if be.Capabilities().MappedPinnedHost && v.name != "table-dma" {
				table = 0
			}
			if v.name == "atomic" {
				assert.Equal(t, table+1, copies, "table and one DMA")
			} else {
				assert.Greater(t, copies, table+1, "the pieces moved in parts")
			}
			var rs []core.Range
			for i := len(hs) - 1; i >= 0; i -= 3 {
				n := hs[i].Len
				rs = append(rs, core.Range{Buf: hs[i], Offset: n / 3, Len: n - n/3}, core.Range{Buf: hs[i], Len: n / 2})
			}
			back, err := be.DownloadMany(rs, nil)
			require.NoError(t, err)
			for j, rg := range rs {
				i := indexOf(hs, rg.Buf)
				require.True(t, bytes.Equal(want[i][rg.Offset:rg.Offset+rg.Len], back[j]), "range %d", j)
			}
		})
	}
}

// BenchmarkGPUW3GPhases is W3G's phase breakdown on the GPU.
func BenchmarkGPUW3GPhases(b *testing.B) { benchGraphReadPhases(b, openXferGPUBench) }

// BenchmarkGPURunPhases is the phase breakdown of a Run that uploads n
// bytes and reads n back (W8's transfers at 16 KiB, 128 KiB and 2 MiB,
// no kernel), from Go slices and from memory pinned through the Backend,
// beside the raw driver's floor for the same copies: pinned async copies
// both ways on one stream and one synchronization.
func BenchmarkGPURunPhases(b *testing.B) {
	for _, n := range []int{16 << 10, 128 << 10, 2 << 20} {
		for _, form := range []string{"go-slices", "pinned", "floor", "pinned-kernel", "floor-kernel"} {
			b.Run(fmt.Sprintf("%dKiB/%s", n>>10, form), func(b *testing.B) {
				drv, err := core.NewCUDADriver(0)
				require.NoError(b, err)
				be, err := core.Open(drv)
				require.NoError(b, err)
				b.Cleanup(func() { assert.NoError(b, be.Close()) })
				up, err := be.Alloc(n)
				require.NoError(b, err)
				rd, err := be.Alloc(n)
				require.NoError(b, err)
				in, dst := make([]byte, n), [][]byte{make([]byte, 0, n)}
				if form != "go-slices" {
					pin, err := be.AllocHostPinned(2 * n)
					require.NoError(b, err)
					b.Cleanup(func() { _ = pin.Free() })
					in, dst = pin.Bytes()[:n], [][]byte{pin.Bytes()[n:n]}
				}
				batch := core.Batch{Uploads: []core.UploadAt{{Buf: up, Data: in}}, Reads: []core.Range{rd.All()}}
				kernel := strings.HasSuffix(form, "-kernel")
				if kernel {
					batch.Steps = []core.Step{{Program: core.ProgramScaleF32(), Bufs: []core.Buffer{up, rd},
						Config: core.DispatchConfig{Scalars: []uint32{math.Float32bits(3)}}}}
				}
				step := func() error {
					dst, err = be.Run(batch, dst)
					return err
				}
				if strings.HasPrefix(form, "floor") {
					step = rawCopiesStep(b, be, drv, up, rd, in, dst[0][:n], kernel)
				}
				for range 20 {
					require.NoError(b, step())
				}
				p := newPhaseTimer(b)
				b.ResetTimer()
				for range b.N {
					p.start()
					if err := step(); err != nil {
						b.Fatal(err)
					}
					p.stop()
				}
				b.StopTimer()
				p.report(b)
			})
		}
	}
}

// rawCopiesStep returns a step that copies in to up and rd to out with the
// driver alone: two async copies on a stream of its own and one
// synchronization, with ScaleF32's kernel from up to rd launched between
// them when kernel is set.
func rawCopiesStep(b *testing.B, be *core.Backend, drv core.Driver, up, rd core.Buffer, in, out []byte, kernel bool) func() error {
	upPtr, err := be.ResidentDevicePtr(up)
	require.NoError(b, err)
	rdPtr, err := be.ResidentDevicePtr(rd)
	require.NoError(b, err)
	st, err := drv.StreamCreate()
	require.NoError(b, err)
	b.Cleanup(func() { assert.NoError(b, drv.StreamDestroy(st)) })
	launch := func() error { return nil }
	if kernel {
		launch = rawScaleLaunch(b, drv, st, upPtr, rdPtr, len(in)/4)
	}
	return func() error {
		if err := drv.MemcpyHtoDAsync(upPtr, in, st); err != nil {
			return err
		}
		if err := launch(); err != nil {
			return err
		}
		if err := drv.MemcpyDtoHAsync(out, rdPtr, st); err != nil {
			return err
		}
		return drv.StreamSynchronize(st)
	}
}

// rawScaleLaunch loads ScaleF32's image into a module of its own and returns
// a launch of it over n floats from x to y on st, with the grid a dispatch
// derives.
func rawScaleLaunch(b *testing.B, drv core.Driver, st core.Stream, x, y uint64, n int) func() error {
	spec := core.ProgramScaleF32().Spec()
	m, err := drv.ModuleLoad(spec.Image)
	require.NoError(b, err)
	b.Cleanup(func() { assert.NoError(b, drv.ModuleUnload(m)) })
	fn, err := drv.ModuleFunction(m, spec.Entry)
	require.NoError(b, err)
	block, maxBlocks := spec.Block, spec.Grid.MaxBlocks
	if block == 0 {
		block = core.DefaultBlockSize
	}
	if maxBlocks == 0 {
		maxBlocks = core.DefaultMaxBlocks
	}
	blocks := min((uint32(n)+block-1)/block, maxBlocks)
	lc := core.LaunchConfig{Grid: [3]uint32{blocks, 1, 1}, Block: [3]uint32{block, 1, 1}}
	args := []core.KernelArg{{Ptr: x, IsPtr: true}, {Ptr: y, IsPtr: true}, {U32: uint32(n)}, {U32: math.Float32bits(3)}}
	return func() error { return drv.Launch(fn, lc, st, args) }
}
