//go:build gpu

// Phase breakdown of single-buffer uploads and readbacks from ordinary Go
// slices (the bandwidth sweep's calls) on a real GPU, under the default
// plan and under plans forced by tuning, so the planner's model can be
// checked against what each plan costs where. Run on a GPU machine:
//
//	.gpu/core.test -test.run '^$' -test.bench GPUSinglePhases -test.benchtime 200x

package core_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/xferplan"
)

// singleVariants are the plans the single-transfer phase benchmark runs.
var singleVariants = []xferPath{
	{"default", nil},
	{"cached-stores", core.WithStagingCache(core.StagingCache{CachedUploadStores: true})},
	{"keep-staging", core.WithStagingCache(core.StagingCache{Evict: core.EvictNever})},
	{"evict-staging", core.WithStagingCache(core.StagingCache{Evict: core.EvictAlways})},
	{"nohint", nil}, // the polling loops without their spin-wait hint
	{"linger50us", core.WithCopyHelperLinger(50 * time.Microsecond)},
	{"park", core.WithCopyHelperLinger(0)},
	{"workers8", core.WithPlanTuning(xferplan.Tuning{MaxWorkers: 8})},
	{"percopy", core.WithPlanTuning(xferplan.Tuning{StageMin: -1})},
	{"cache16k", core.WithPlanModel(smallCacheModel())},                      // helpers share copies above 16 KiB
	{"percopy-cache16k", core.WithPlanTuning(xferplan.Tuning{StageMin: -1})}, // and singleExtra's model
	{"inline-staged-evict", core.WithInlineStagedEviction()},                 // evict in the copy out even with a second set
}

// singleExtra holds a second option of the variants that take two.
var singleExtra = map[string]core.Option{"percopy-cache16k": core.WithPlanModel(smallCacheModel())}

// smallCacheModel is the reference model with copies above 16 KiB no
// longer treated as cache-bound, so the planner spreads them over helpers.
func smallCacheModel() xferplan.Model {
	m := xferplan.Reference()
	m.CacheBytes = 16 << 10
	return m
}

func openGPUWith(b *testing.B, with ...core.Option) *core.Backend {
	b.Helper()
	var opts []core.Option
	for _, opt := range with {
		if opt != nil {
			opts = append(opts, opt)
		}
	}
	be, err := core.OpenCUDA(0, opts...)
	if err != nil {
		b.Fatalf("OpenCUDA: %v", err)
	}
	b.Cleanup(func() {
		if err := be.Close(); err != nil {
			b.Errorf("Close: %v", err)
		}
	})
	return be
}

func BenchmarkGPUSinglePhases(b *testing.B) {
	for _, v := range singleVariants {
		b.Run(v.name, func(b *testing.B) {
			if v.name == "nohint" {
				b.Cleanup(core.SetSpinHint(false))
			}
			be := openGPUWith(b, v.opt, singleExtra[v.name])
			for _, n := range []int{64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20} {
				for _, dir := range []string{"up", "down"} {
					b.Run(fmt.Sprintf("%s/%dKiB", dir, n>>10), func(b *testing.B) { benchSingle(b, be, n, dir == "down") })
				}
			}
		})
	}
}

// benchSingle times Upload or Download of one n-byte
// buffer from and into one Go slice, as the sweep does, with each phase's
// median.
func benchSingle(b *testing.B, be *core.Backend, n int, down bool) {
	bufs, ups := xferBuffers(b, be, 1, n)
	h, data := bufs[0], ups[0].Data
	call := func() (err error) {
		if down {
			data, err = be.Download(h.All(), data)
			return err
		}
		return be.Upload(core.UploadAt{Buf: h, Data: data})
	}
	for range 5 {
		if err := call(); err != nil {
			b.Fatal(err)
		}
	}
	p := newPhaseTimer(b)
	b.SetBytes(int64(n))
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
}
