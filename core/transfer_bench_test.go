package core_test

import (
	"fmt"
	"math"
	"math/rand"
	"slices"
	"testing"
	"time"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/xferplan"
)

// Transfer-path benchmarks: W1, W3 (1024 x 4 KiB, packed against per-copy)
// and W2, W6 (256 MiB, pipelined against staged whole). The workloads are
// shared with the GPU benchmarks in transfer_gpu_test.go; on sim they
// measure this host's copying and the simulator, not a GPU.

// xferPath is one way of moving the bytes, chosen by a test-only tuning.
type xferPath struct {
	name string
	opt  core.Option // nil: the defaults
}

// open opens a Backend for p.
func (p xferPath) open(b *testing.B, open xferOpener) *core.Backend { return open(b, p.opt) }

var (
	packedPaths = []xferPath{
		{"packed", nil},
		{"packed-2parts", core.WithTransferTuning(core.TransferTuning{PackParts: 2})},
		{"packed-4parts", core.WithTransferTuning(core.TransferTuning{PackParts: 4})},
		{"packed-8workers", core.WithTransferTuning(core.TransferTuning{Workers: 8})},
		{"packed-park", core.WithTransferTuning(core.TransferTuning{Linger: -1})},
		{"per-copy", core.WithTransferTuning(core.TransferTuning{PackMinCopies: -1})},
	}
	pipelinePaths = []xferPath{
		{"pipelined", nil},
		{"pipelined-nolinger", core.WithTransferTuning(core.TransferTuning{PipeLinger: -1})},
		{"pipelined-4blocks", core.WithTransferTuning(core.TransferTuning{Blocks: 4})},
		{"pipelined-64M-chunks", core.WithTransferTuning(core.TransferTuning{ChunkBytes: 64 << 20, Blocks: 2})},
		{"staged-whole", core.WithTransferTuning(core.TransferTuning{PipelineMinBytes: -1})},
	}
)

// xferOpener opens a Backend with opt (nil: defaults) that the benchmark's
// cleanup closes.
type xferOpener func(b *testing.B, opt core.Option) *core.Backend

// xferBuffers allocates count buffers of n random bytes on be and uploads them.
func xferBuffers(b *testing.B, be *core.Backend, count, n int) ([]core.Buffer, []core.UploadAt) {
	return xferSizedBuffers(b, be, slices.Repeat([]int{n}, count))
}

// xferSizedBuffers allocates a buffer of random bytes per size on be and
// uploads them.
func xferSizedBuffers(b *testing.B, be *core.Backend, sizes []int) ([]core.Buffer, []core.UploadAt) {
	b.Helper()
	r := rand.New(rand.NewSource(1))
	bufs := make([]core.Buffer, len(sizes))
	ups := make([]core.UploadAt, len(sizes))
	for i, n := range sizes {
		h, err := be.Alloc(n)
		if err != nil {
			b.Fatalf("Alloc: %v", err)
		}
		data := make([]byte, n)
		r.Read(data)
		bufs[i], ups[i] = h, core.UploadAt{Buf: h, Data: data}
	}
	if err := be.Upload(ups...); err != nil { // warms pools and modules
		b.Fatalf("Upload: %v", err)
	}
	b.Cleanup(func() {
		for _, h := range bufs {
			_ = be.Free(h)
		}
	})
	return bufs, ups
}

func benchW1(b *testing.B, open xferOpener) {
	for _, p := range packedPaths {
		b.Run(p.name, func(b *testing.B) {
			be := p.open(b, open)
			_, ups := xferBuffers(b, be, 1024, 4<<10)
			if err := be.Upload(ups...); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(1024 * 4 << 10)
			b.ResetTimer()
			for range b.N {
				if err := be.Upload(ups...); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func benchW3(b *testing.B, open xferOpener) {
	for _, p := range packedPaths {
		b.Run(p.name, func(b *testing.B) {
			be := p.open(b, open)
			bufs, _ := xferBuffers(b, be, 1024, 4<<10)
			rs := allOf(bufs)
			dst, err := be.DownloadMany(rs, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(1024 * 4 << 10)
			b.ResetTimer()
			for range b.N {
				if dst, err = be.DownloadMany(rs, dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func benchW2(b *testing.B, open xferOpener) {
	for _, p := range pipelinePaths {
		b.Run(p.name, func(b *testing.B) {
			be := p.open(b, open)
			_, ups := xferBuffers(b, be, 1, 256<<20)
			b.SetBytes(256 << 20)
			b.ResetTimer()
			for range b.N {
				if err := be.Upload(core.UploadAt{Buf: ups[0].Buf, Data: ups[0].Data}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func benchW6(b *testing.B, open xferOpener) {
	for _, p := range pipelinePaths {
		b.Run(p.name, func(b *testing.B) {
			be := p.open(b, open)
			bufs, _ := xferBuffers(b, be, 1, 256<<20)
			dst, err := be.Download(bufs[0].All(), nil)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(256 << 20)
			b.ResetTimer()
			for range b.N {
				if dst, err = be.Download(bufs[0].All(), dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func openXferSim(b *testing.B, opt core.Option) *core.Backend {
	be, _ := openSim(b, sim.Config{TotalMemory: 2 << 30}, opt)
	return be
}

func BenchmarkTransferW1UploadMany1024x4K(b *testing.B)   { benchW1(b, openXferSim) }
func BenchmarkTransferW3DownloadMany1024x4K(b *testing.B) { benchW3(b, openXferSim) }
func BenchmarkTransferW2Upload256MiB(b *testing.B)        { benchW2(b, openXferSim) }
func BenchmarkTransferW6Download256MiB(b *testing.B)      { benchW6(b, openXferSim) }

// phaseVariants are the tunings the phase benchmarks compare side by side.
var phaseVariants = []xferPath{
	{"warmup", nil}, // the first variant of a process runs on a cold host: compare the others
	{"default", nil},
	{"keep-staging", core.WithStagingCache(core.StagingCache{Evict: core.EvictNever})},
	{"evict-staging", core.WithStagingCache(core.StagingCache{Evict: core.EvictAlways})},
	{"inline-evict", core.WithTransferTuning(core.TransferTuning{InlineEvict: true})},
	{"inline-parts-evict", core.WithInlinePartsEviction()}, // evict in the copy-out even with a second set
	{"table-dma", core.WithTableDMA()},                     // readbacks DMA their gather table
	{"sync-each", core.WithTransferTuning(core.TransferTuning{SyncEach: true})},
	{"block128", core.WithTransferTuning(core.TransferTuning{PackBlock: 128})},
	{"grid256", core.WithTransferTuning(core.TransferTuning{PackGrid: 256})},
	{"block512-grid512", core.WithTransferTuning(core.TransferTuning{PackBlock: 512, PackGrid: 512})},
	{"fence-spin50us", core.WithTransferTuning(core.TransferTuning{FenceSpin: 50 * time.Microsecond})},
	{"fence-spin300us", core.WithTransferTuning(core.TransferTuning{FenceSpin: 300 * time.Microsecond})},
	{"park", core.WithTransferTuning(core.TransferTuning{Linger: -1})},
	{"linger100us", core.WithTransferTuning(core.TransferTuning{Linger: 100 * time.Microsecond})},
	{"park-w12", core.WithTransferTuning(core.TransferTuning{Linger: -1, Workers: 12})},
	{"park-no-prewake", core.WithTransferTuning(core.TransferTuning{Linger: -1, Prewake: -1})},
	{"plain-copies", core.WithTransferTuning(core.TransferTuning{PlainPack: true, PlainUnpack: true})},
	{"no-prewake", core.WithTransferTuning(core.TransferTuning{Prewake: -1})},
	{"workers12", core.WithTransferTuning(core.TransferTuning{Workers: 12})},
	{"workers8", core.WithTransferTuning(core.TransferTuning{Workers: 8})},
	{"workers4", core.WithTransferTuning(core.TransferTuning{Workers: 4})},
	{"workers1", core.WithTransferTuning(core.TransferTuning{Workers: 1})},
}

// phaseTimer collects, per benchmark iteration, the time between
// consecutive phase ends, and reports each phase's median in microseconds.
type phaseTimer struct {
	order []string
	times map[string][]time.Duration
	last  time.Time
	iter  map[string]time.Duration
}

func newPhaseTimer(b *testing.B) *phaseTimer {
	p := &phaseTimer{times: map[string][]time.Duration{}}
	b.Cleanup(core.SetPhaseHook(p.mark))
	return p
}

func (p *phaseTimer) start() { p.last, p.iter = time.Now(), map[string]time.Duration{} }

func (p *phaseTimer) mark(name string) {
	now := time.Now()
	if p.iter == nil {
		return
	}
	if _, ok := p.times[name]; !ok {
		p.order = append(p.order, name)
		p.times[name] = nil
	}
	p.iter[name] += now.Sub(p.last)
	p.last = now
}

// stop ends an iteration; the time since the last phase is "release".
func (p *phaseTimer) stop() {
	p.mark("release")
	var total time.Duration
	for name, d := range p.iter {
		p.times[name] = append(p.times[name], d)
		total += d
	}
	p.times["total"] = append(p.times["total"], total)
	p.iter = nil
}

func medianUS(ds []time.Duration) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return float64(s[len(s)/2]) / 1e3
}

func (p *phaseTimer) report(b *testing.B) {
	for i, name := range p.order {
		b.ReportMetric(medianUS(p.times[name]), fmt.Sprintf("%02d%s-us", i, name))
	}
	b.ReportMetric(medianUS(p.times["total"]), "total-us")
}

func benchPhases(b *testing.B, open xferOpener, download bool) {
	benchPhasesOf(b, open, download, phaseVariants, slices.Repeat([]int{4 << 10}, 1024))
}

// mixedSizes are W7's buffer sizes: 2048 drawn log-uniform from 16 B to
// 256 KiB.
func mixedSizes() []int {
	r := rand.New(rand.NewSource(7))
	lo, hi := math.Log(16), math.Log(256<<10)
	out := make([]int, 2048)
	for i := range out {
		out[i] = min(max(int(math.Exp(lo+r.Float64()*(hi-lo))), 16), 256<<10)
	}
	return out
}

// mixedVariants are the tunings the W7 phase benchmarks compare.
var mixedVariants = []xferPath{
	{"default", nil},
	{"keep-staging", core.WithStagingCache(core.StagingCache{Evict: core.EvictNever})},
	{"evict-staging", core.WithStagingCache(core.StagingCache{Evict: core.EvictAlways})},
	{"inline-evict", core.WithTransferTuning(core.TransferTuning{InlineEvict: true})},
	{"table-dma", core.WithTableDMA()},
	{"sync-each", core.WithTransferTuning(core.TransferTuning{SyncEach: true})},
	{"plain-copies", core.WithTransferTuning(core.TransferTuning{PlainPack: true, PlainUnpack: true})},
	{"workers8", core.WithPlanTuning(xferplan.Tuning{MaxWorkers: 8})},
	{"one-part", core.WithTransferTuning(core.TransferTuning{PackParts: 1})},
}

func benchPhasesOf(b *testing.B, open xferOpener, download bool, variants []xferPath, sizes []int) {
	total := 0
	for _, n := range sizes {
		total += n
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			be := v.open(b, open)
			bufs, ups := xferSizedBuffers(b, be, sizes)
			rs := allOf(bufs)
			var dst [][]byte
			call := func() error {
				if download {
					var err error
					dst, err = be.DownloadMany(rs, dst)
					return err
				}
				return be.Upload(ups...)
			}
			for range 5 {
				if err := call(); err != nil {
					b.Fatal(err)
				}
			}
			p := newPhaseTimer(b)
			b.ReportAllocs()
			b.SetBytes(int64(total))
			b.ResetTimer()
			for range b.N {
				p.start()
				if err := call(); err != nil {
					b.Fatal(err)
				}
				p.stop()
			}
			b.StopTimer()
			p.report(b)
		})
	}
}

func BenchmarkTransferW1Phases(b *testing.B) { benchPhases(b, openXferSim, false) }
func BenchmarkTransferW3Phases(b *testing.B) { benchPhases(b, openXferSim, true) }

// The phases of W7's halves: 2048 buffers of mixed sizes up and back.
func BenchmarkTransferW7UPhases(b *testing.B) {
	benchPhasesOf(b, openXferSim, false, mixedVariants, mixedSizes())
}
func BenchmarkTransferW7DPhases(b *testing.B) {
	benchPhasesOf(b, openXferSim, true, mixedVariants, mixedSizes())
}

// graphPhaseVariants are the tunings the graph readback phases compare.
var graphPhaseVariants = []xferPath{
	{"warmup", nil},
	{"default", nil},
	{"parts2", core.WithTransferTuning(core.TransferTuning{PackParts: 2})},
	{"parts4", core.WithTransferTuning(core.TransferTuning{PackParts: 4})},
	{"parts8", core.WithTransferTuning(core.TransferTuning{PackParts: 8})},
	{"parts16", core.WithTransferTuning(core.TransferTuning{PackParts: 16})},
	{"keep-staging", core.WithStagingCache(core.StagingCache{Evict: core.EvictNever})},
	{"atomic", core.WithAtomicReadbacks(true)}, // one DMA inside the graph, unpacked after the fence
}

// benchGraphReadPhases is W3G's phase breakdown: W3's reads captured once
// and replayed into reused slots under each variant.
func benchGraphReadPhases(b *testing.B, open xferOpener) {
	sizes := slices.Repeat([]int{4 << 10}, 1024)
	for _, v := range graphPhaseVariants {
		b.Run(v.name, func(b *testing.B) {
			be := v.open(b, open)
			bufs, _ := xferSizedBuffers(b, be, sizes)
			g, err := be.Capture(core.Batch{Reads: allOf(bufs)})
			if err != nil {
				b.Fatal(err)
			}
			defer g.Close()
			var dst [][]byte
			for range 5 {
				if dst, err = g.Replay(dst); err != nil {
					b.Fatal(err)
				}
			}
			p := newPhaseTimer(b)
			b.SetBytes(int64(4 << 10 * len(sizes)))
			b.ResetTimer()
			for range b.N {
				p.start()
				if dst, err = g.Replay(dst); err != nil {
					b.Fatal(err)
				}
				p.stop()
			}
			b.StopTimer()
			p.report(b)
		})
	}
}

func BenchmarkTransferW3GPhases(b *testing.B) { benchGraphReadPhases(b, openXferSim) }
