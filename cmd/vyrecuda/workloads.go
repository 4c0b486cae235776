package main

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"time"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/internal/churn"
)

// workload is one of the benchmark workloads (docs/BENCHMARKS.md), sized by benchConfig.
type workload struct {
	ID     string
	Title  string
	Bytes  int64 // bytes moved per run, for GB/s; 0 for latency workloads
	Ops    int   // operations per run, for the per-operation time
	Target target
	// DMADir, when set, has bench time the pinned DMA of Bytes in that
	// direction beside the workload (Target.MaxDMARatio judges against it).
	DMADir string
	// prepare allocates what the workload needs and returns the measured
	// body and the cleanup that frees it all.
	prepare func(b *core.Backend) (body func() error, cleanup func() error, err error)
}

// target is a workload's goal on the H100 (docs/BENCHMARKS.md lists them).
type target struct {
	Text     string
	MaxRun   time.Duration // median run at most this, when set
	MaxPerOp time.Duration // median per operation at most this, when set
	MinGBps  float64       // median rate at least this, when set
	// MaxDMARatio: median run at most this many times the pinned DMA of
	// the same bytes, when set (and the DMA was measured).
	MaxDMARatio float64
}

// met reports whether r reaches the target.
func (t target) met(r workloadResult) bool {
	switch {
	case t.MaxDMARatio > 0:
		return r.PinnedDMANs > 0 && float64(r.MedianNs) <= t.MaxDMARatio*float64(r.PinnedDMANs)
	case t.MaxRun > 0:
		return time.Duration(r.MedianNs) <= t.MaxRun
	case t.MaxPerOp > 0:
		return r.PerOpNs <= float64(t.MaxPerOp.Nanoseconds())
	case t.MinGBps > 0:
		return r.GBps >= t.MinGBps
	}
	return true
}

// w8ID is the inference step (w8.go), which -workloads selects like the
// others; it is measured in forms and sizes, each a row, not as one body.
const w8ID = "W8"

// workloadIDs lists the workloads measured as one body each, in the order
// bench runs them (W8 comes after them).
// W4B is W4 through the Backend's own device pool rather than the optimizer
// dispatcher's, for callers that use Backend.Alloc directly.
// W4C is the allocation churn (package internal/churn) through the Backend.
// W1G and W3G replay W1's upload and W3's readback from CUDA graphs. W5G
// replays W5 from a CUDA graph, and W5C times capturing it. W7U and W7D
// are W7's upload and readback halves.
func workloadIDs() []string {
	return []string{"W1", "W1G", "W2", "W3", "W3G", "W4", "W4B", "W4C", "W5", "W5G", "W5C", "W6", "W7U", "W7D"}
}

// newWorkload builds workload id for cfg; id comes from workloadIDs.
func newWorkload(id string, cfg benchConfig) workload {
	small := formatBytes(uint64(cfg.Small))
	large := formatBytes(uint64(cfg.Large))
	switch id {
	case "W1":
		return workload{
			ID: id, Title: fmt.Sprintf("upload %d x %s into %d resident buffers", cfg.Count, small, cfg.Count),
			Bytes: int64(cfg.Count) * int64(cfg.Small), Ops: cfg.Count,
			Target:  target{Text: "<= 200 us", MaxRun: 200 * time.Microsecond},
			prepare: func(b *core.Backend) (func() error, func() error, error) { return prepareManyUpload(b, cfg) },
		}
	case "W2":
		return workload{
			ID: id, Title: fmt.Sprintf("upload %s from a Go slice", large),
			Bytes: int64(cfg.Large), Ops: 1,
			Target:  target{Text: ">= 38 GB/s", MinGBps: 38},
			prepare: func(b *core.Backend) (func() error, func() error, error) { return prepareLargeUpload(b, cfg) },
		}
	case "W3":
		return workload{
			ID: id, Title: fmt.Sprintf("read back %d x %s from %d buffers", cfg.Count, small, cfg.Count),
			Bytes: int64(cfg.Count) * int64(cfg.Small), Ops: cfg.Count,
			Target:  target{Text: "<= 200 us", MaxRun: 200 * time.Microsecond},
			prepare: func(b *core.Backend) (func() error, func() error, error) { return prepareManyReadback(b, cfg) },
		}
	case "W4":
		return workload{
			ID: id, Title: fmt.Sprintf("pooled alloc+free of %s (optimizer pool), %d pairs", formatBytes(uint64(cfg.AllocSize)), cfg.Allocs),
			Ops:     cfg.Allocs,
			Target:  target{Text: "<= 0.5 us per pair", MaxPerOp: 500 * time.Nanosecond},
			prepare: func(b *core.Backend) (func() error, func() error, error) { return prepareOptimizerAlloc(b, cfg) },
		}
	case "W4B":
		return workload{
			ID: id, Title: fmt.Sprintf("pooled alloc+free of %s (Backend device cache), %d pairs", formatBytes(uint64(cfg.AllocSize)), cfg.Allocs),
			Ops:     cfg.Allocs,
			Target:  target{Text: "<= 0.5 us per pair", MaxPerOp: 500 * time.Nanosecond},
			prepare: func(b *core.Backend) (func() error, func() error, error) { return preparePooledAlloc(b, cfg) },
		}
	case "W4C":
		return workload{
			ID: id, Title: fmt.Sprintf("churn: %d random alloc/free of 1 B-4 MiB (Backend cache)", cfg.ChurnSteps),
			Ops:     cfg.ChurnSteps,
			Target:  target{Text: "<= 1.0 us per op", MaxPerOp: time.Microsecond},
			prepare: func(b *core.Backend) (func() error, func() error, error) { return prepareChurn(b, cfg) },
		}
	case "W5":
		return workload{
			ID: id, Title: fmt.Sprintf("%d dependent tiny launches + 1 fence", cfg.Launches),
			Ops:     cfg.Launches,
			Target:  target{Text: "<= 450 us", MaxRun: 450 * time.Microsecond},
			prepare: func(b *core.Backend) (func() error, func() error, error) { return prepareLaunches(b, cfg) },
		}
	case "W1G", "W3G", "W5G", "W5C":
		return graphWorkload(id, cfg)
	case "W7U", "W7D":
		return mixedWorkload(id, cfg)
	default: // W6
		return workload{
			ID: "W6", Title: fmt.Sprintf("download %s into a Go slice", large),
			Bytes: int64(cfg.Large), Ops: 1,
			Target:  target{Text: ">= 38 GB/s", MinGBps: 38},
			prepare: func(b *core.Backend) (func() error, func() error, error) { return prepareLargeDownload(b, cfg) },
		}
	}
}

// allocMany allocates n buffers of size bytes, freeing them all on failure.
func allocMany(b *core.Backend, n, size int) ([]core.Buffer, error) {
	hs := make([]core.Buffer, 0, n)
	for i := 0; i < n; i++ {
		h, err := b.Alloc(size)
		if err != nil {
			return nil, errors.Join(err, freeAll(b, hs))
		}
		hs = append(hs, h)
	}
	return hs, nil
}

// freeAll frees every buffer and returns every failure.
func freeAll(b *core.Backend, hs []core.Buffer) error {
	var errs []error
	for _, h := range hs {
		if err := b.Free(h); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// W1: one Upload of Count small buffers.
func prepareManyUpload(b *core.Backend, cfg benchConfig) (func() error, func() error, error) {
	hs, err := allocMany(b, cfg.Count, cfg.Small)
	if err != nil {
		return nil, nil, err
	}
	ups := make([]core.UploadAt, len(hs))
	for i, h := range hs {
		ups[i] = core.UploadAt{Buf: h, Data: pattern(cfg.Small, uint32(i))}
	}
	return func() error { return b.Upload(ups...) }, func() error { return freeAll(b, hs) }, nil
}

// W2: one Upload of a Large buffer from an ordinary Go slice.
func prepareLargeUpload(b *core.Backend, cfg benchConfig) (func() error, func() error, error) {
	h, err := b.Alloc(cfg.Large)
	if err != nil {
		return nil, nil, err
	}
	data := pattern(cfg.Large, 2)
	return func() error { return b.Upload(core.UploadAt{Buf: h, Data: data}) }, func() error { return b.Free(h) }, nil
}

// uploadedBuffers allocates Count small buffers and uploads a pattern of
// its own into each: W3's and W3G's buffers.
func uploadedBuffers(b *core.Backend, cfg benchConfig) ([]core.Buffer, []core.UploadAt, error) {
	hs, err := allocMany(b, cfg.Count, cfg.Small)
	if err != nil {
		return nil, nil, err
	}
	ups := make([]core.UploadAt, len(hs))
	for i, h := range hs {
		ups[i] = core.UploadAt{Buf: h, Data: pattern(cfg.Small, uint32(i))}
	}
	if err := b.Upload(ups...); err != nil {
		return nil, nil, errors.Join(err, freeAll(b, hs))
	}
	return hs, ups, nil
}

// W3: one DownloadMany of Count small buffers into reused slots.
func prepareManyReadback(b *core.Backend, cfg benchConfig) (func() error, func() error, error) {
	hs, _, err := uploadedBuffers(b, cfg)
	if err != nil {
		return nil, nil, err
	}
	rs := wholeRanges(hs)
	var dst [][]byte
	body := func() (err error) {
		dst, err = b.DownloadMany(rs, dst)
		return err
	}
	return body, func() error { return freeAll(b, hs) }, nil
}

// W4: Allocs pairs of the optimizer dispatcher's Alloc and Free: after the
// first, an exact-size pool pop and push.
func prepareOptimizerAlloc(b *core.Backend, cfg benchConfig) (func() error, func() error, error) {
	d, err := core.NewOptimizerDispatcher(b)
	if err != nil {
		return nil, nil, err
	}
	body := func() error {
		for i := 0; i < cfg.Allocs; i++ {
			h, err := d.Alloc(cfg.AllocSize)
			if err != nil {
				return err
			}
			if err := d.Free(h); err != nil {
				return err
			}
		}
		return nil
	}
	return body, d.Close, nil
}

// W4B: Allocs pairs of Alloc and Free, served by the
// Backend's device pool after the first.
func preparePooledAlloc(b *core.Backend, cfg benchConfig) (func() error, func() error, error) {
	body := func() error {
		for i := 0; i < cfg.Allocs; i++ {
			h, err := b.Alloc(cfg.AllocSize)
			if err != nil {
				return err
			}
			if err := b.Free(h); err != nil {
				return err
			}
		}
		return nil
	}
	return body, func() error { return nil }, nil
}

// W4C: the churn sequence of package churn (the PyTorch peer benchmark's
// shape), every buffer freed again at the end of each run.
func prepareChurn(b *core.Backend, cfg benchConfig) (func() error, func() error, error) {
	steps := churn.Steps(cfg.ChurnSteps, 1, churn.DefaultMaxSize, churn.DefaultMaxLive)
	live := make([]core.Buffer, 0, churn.DefaultMaxLive)
	body := func() (err error) {
		live, err = churn.Run(steps, live, b.Alloc, b.Free)
		return err
	}
	return body, func() error { return nil }, nil
}

// W6: one Download of a Large buffer into a reused Go slice.
func prepareLargeDownload(b *core.Backend, cfg benchConfig) (func() error, func() error, error) {
	h, err := b.Alloc(cfg.Large)
	if err != nil {
		return nil, nil, err
	}
	if err := b.Upload(core.UploadAt{Buf: h, Data: pattern(cfg.Large, 6)}); err != nil {
		return nil, nil, errors.Join(err, b.Free(h))
	}
	dst := make([]byte, cfg.Large)
	body := func() (err error) {
		dst, err = b.Download(h.All(), dst)
		return err
	}
	return body, func() error { return b.Free(h) }, nil
}

// mixedWorkload builds W7U (upload) or W7D (readback): MixedCount buffers of
// log-uniform sizes, judged against the pinned DMA of their bytes.
func mixedWorkload(id string, cfg benchConfig) workload {
	sizes := mixedSizes(cfg)
	total := int64(0)
	for _, n := range sizes {
		total += int64(n)
	}
	w := workload{
		ID: id, Bytes: total, Ops: len(sizes),
		Target: target{Text: "<= 1.5 x pinned DMA", MaxDMARatio: 1.5},
	}
	mixed := fmt.Sprintf("%d buffers of %s-%s (log-uniform, %s)", len(sizes), formatBytes(uint64(cfg.MixedMin)),
		formatBytes(uint64(cfg.MixedMax)), formatBytes(uint64(total)))
	if id == "W7U" {
		w.Title, w.DMADir = "upload "+mixed, dirUpload
		w.prepare = func(b *core.Backend) (func() error, func() error, error) { return prepareMixed(b, sizes, false) }
	} else {
		w.Title, w.DMADir = "read back "+mixed, dirReadback
		w.prepare = func(b *core.Backend) (func() error, func() error, error) { return prepareMixed(b, sizes, true) }
	}
	return w
}

// mixedSizes draws W7's buffer sizes: MixedCount sizes log-uniform between
// MixedMin and MixedMax bytes, the same on every run (a fixed seed).
func mixedSizes(cfg benchConfig) []int {
	r := rand.New(rand.NewSource(7))
	lo, hi := math.Log(float64(cfg.MixedMin)), math.Log(float64(cfg.MixedMax))
	out := make([]int, cfg.MixedCount)
	for i := range out {
		n := int(math.Exp(lo + r.Float64()*(hi-lo)))
		out[i] = min(max(n, cfg.MixedMin), cfg.MixedMax)
	}
	return out
}

// W7: one Upload of many buffers (or, readback, one DownloadMany
// into reused slots of exactly the needed capacity) over buffers of mixed
// sizes.
func prepareMixed(b *core.Backend, sizes []int, readback bool) (func() error, func() error, error) {
	hs := make([]core.Buffer, 0, len(sizes))
	for _, n := range sizes {
		h, err := b.Alloc(n)
		if err != nil {
			return nil, nil, errors.Join(err, freeAll(b, hs))
		}
		hs = append(hs, h)
	}
	ups := make([]core.UploadAt, len(hs))
	for i, h := range hs {
		ups[i] = core.UploadAt{Buf: h, Data: pattern(h.Len, uint32(i))}
	}
	cleanup := func() error { return freeAll(b, hs) }
	if !readback {
		return func() error { return b.Upload(ups...) }, cleanup, nil
	}
	if err := b.Upload(ups...); err != nil {
		return nil, nil, errors.Join(err, cleanup())
	}
	dst := make([][]byte, len(hs))
	for i, h := range hs {
		dst[i] = make([]byte, 0, h.Len)
	}
	rs := wholeRanges(hs)
	body := func() (err error) {
		dst, err = b.DownloadMany(rs, dst)
		return err
	}
	return body, cleanup, nil
}

// wholeRanges returns the range of every byte of each buffer, in order.
func wholeRanges(hs []core.Buffer) []core.Range {
	rs := make([]core.Range, len(hs))
	for i, h := range hs {
		rs[i] = h.All()
	}
	return rs
}
