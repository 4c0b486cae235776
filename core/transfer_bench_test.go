package core_test

import (
	"math/rand"
	"testing"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
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

var (
	packedPaths = []xferPath{
		{"packed", nil},
		{"packed-4parts", core.WithTransferTuning(core.TransferTuning{PackParts: 4})},
		{"per-copy", core.WithTransferTuning(core.TransferTuning{PackMinCopies: -1})},
	}
	pipelinePaths = []xferPath{
		{"pipelined", nil},
		{"pipelined-8M-4blocks", core.WithTransferTuning(core.TransferTuning{ChunkBytes: 8 << 20, Blocks: 4})},
		{"pipelined-16M-4blocks", core.WithTransferTuning(core.TransferTuning{ChunkBytes: 16 << 20, Blocks: 4})},
		{"staged-whole", core.WithTransferTuning(core.TransferTuning{PipelineMinBytes: -1})},
		{"staged-whole-1thread", core.WithTransferTuning(core.TransferTuning{PipelineMinBytes: -1, Workers: 1})},
	}
)

// xferOpener opens a Backend with opt (nil: defaults) that the benchmark's
// cleanup closes.
type xferOpener func(b *testing.B, opt core.Option) *core.Backend

// xferBuffers allocates count buffers of n random bytes on be and uploads them.
func xferBuffers(b *testing.B, be *core.Backend, count, n int) ([]core.Buffer, []core.Upload) {
	b.Helper()
	r := rand.New(rand.NewSource(1))
	bufs := make([]core.Buffer, count)
	ups := make([]core.Upload, count)
	for i := range bufs {
		h, err := be.AllocateResident(n)
		if err != nil {
			b.Fatalf("AllocateResident: %v", err)
		}
		data := make([]byte, n)
		r.Read(data)
		bufs[i], ups[i] = h, core.Upload{Buf: h, Data: data}
	}
	if err := be.UploadResidentMany(ups); err != nil { // warms pools and modules
		b.Fatalf("UploadResidentMany: %v", err)
	}
	b.Cleanup(func() {
		for _, h := range bufs {
			_ = be.FreeResident(h)
		}
	})
	return bufs, ups
}

func benchW1(b *testing.B, open xferOpener) {
	for _, p := range packedPaths {
		b.Run(p.name, func(b *testing.B) {
			be := open(b, p.opt)
			_, ups := xferBuffers(b, be, 1024, 4<<10)
			if err := be.UploadResidentMany(ups); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(1024 * 4 << 10)
			b.ResetTimer()
			for range b.N {
				if err := be.UploadResidentMany(ups); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func benchW3(b *testing.B, open xferOpener) {
	for _, p := range packedPaths {
		b.Run(p.name, func(b *testing.B) {
			be := open(b, p.opt)
			bufs, _ := xferBuffers(b, be, 1024, 4<<10)
			dst, err := be.DownloadResidentManyInto(bufs, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(1024 * 4 << 10)
			b.ResetTimer()
			for range b.N {
				if dst, err = be.DownloadResidentManyInto(bufs, dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func benchW2(b *testing.B, open xferOpener) {
	for _, p := range pipelinePaths {
		b.Run(p.name, func(b *testing.B) {
			be := open(b, p.opt)
			_, ups := xferBuffers(b, be, 1, 256<<20)
			b.SetBytes(256 << 20)
			b.ResetTimer()
			for range b.N {
				if err := be.UploadResident(ups[0].Buf, ups[0].Data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func benchW6(b *testing.B, open xferOpener) {
	for _, p := range pipelinePaths {
		b.Run(p.name, func(b *testing.B) {
			be := open(b, p.opt)
			bufs, _ := xferBuffers(b, be, 1, 256<<20)
			dst, err := be.DownloadResidentInto(bufs[0], nil)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(256 << 20)
			b.ResetTimer()
			for range b.N {
				if dst, err = be.DownloadResidentInto(bufs[0], dst); err != nil {
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
