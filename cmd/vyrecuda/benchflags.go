package main

import (
	"flag"
	"fmt"
	"io"
)

// benchFlags registers bench's flags over cfg's defaults. After parsing,
// apply copies the values that need converting into cfg.
func benchFlags(cfg *benchConfig, stderr io.Writer) (fs *flag.FlagSet, apply func()) {
	fs = flag.NewFlagSet("bench", flag.ContinueOnError)
	dev, ordinal := deviceFlags(fs)
	fs.IntVar(&cfg.Repeats, "repeats", cfg.Repeats, "measured runs per workload and sweep size (median, min and max are over these)")
	fs.IntVar(&cfg.Warmup, "warmup", cfg.Warmup, "unmeasured runs before the measured ones")
	fs.IntVar(&cfg.Count, "count", cfg.Count, "W1/W3: number of small buffers")
	small, large := sizeFlag(cfg.Small), sizeFlag(cfg.Large)
	allocSize, sweepMin, sweepMax := sizeFlag(cfg.AllocSize), sizeFlag(cfg.SweepMin), sizeFlag(cfg.SweepMax)
	fs.Var(&small, "small", "W1/W3: bytes per small buffer")
	fs.Var(&large, "large", "W2/W6: bytes of the large upload and download")
	fs.IntVar(&cfg.Allocs, "allocs", cfg.Allocs, "W4: alloc+free pairs per run")
	fs.Var(&allocSize, "alloc-size", "W4: bytes per allocation")
	fs.IntVar(&cfg.ChurnSteps, "churn-steps", cfg.ChurnSteps, "W4C: alloc/free steps per run")
	fs.IntVar(&cfg.Launches, "launches", cfg.Launches, "W5: dependent launches per run")
	fs.IntVar(&cfg.MixedCount, "mixed-count", cfg.MixedCount, "W7: number of buffers of mixed sizes")
	mixedMax := sizeFlag(cfg.MixedMax)
	fs.Var(&mixedMax, "mixed-max", "W7: largest buffer (sizes are log-uniform from 16 B)")
	w8Sizes := sizeListFlag(cfg.W8Sizes)
	fs.Var(&w8Sizes, "w8-sizes", "W8: bytes each way, comma-separated multiples of 4")
	fs.IntVar(&cfg.W8Steps, "w8-steps", cfg.W8Steps, "W8: measured steps per form and size (median, min and max are over these)")
	fs.IntVar(&cfg.W8Warmup, "w8-warmup", cfg.W8Warmup, "W8: unmeasured steps before the measured ones")
	fs.StringVar(&cfg.Peers, "peers", "", "W8: a file holding the output of the PyTorch peer script, printed beside W8 with the ratios")
	fs.Var(&sweepMin, "sweep-min", "smallest transfer of the bandwidth sweep")
	fs.Var(&sweepMax, "sweep-max", "largest transfer of the bandwidth sweep (sizes grow 4x)")
	fs.DurationVar(&cfg.CopyJob, "plan-copy-job", 0, "transfer planner: cost of each helper of a copy job (0: the reference model's)")
	fs.Float64Var(&cfg.DMASlowdown, "plan-dma-slowdown", -1, "transfer planner: upload DMA slowdown per GB/s of host copying past the link beside it (negative: the reference model's)")
	fs.IntVar(&cfg.Workers, "plan-workers", 0, "transfer planner: most copy goroutines per call (0: GOMAXPROCS, at most 16)")
	fs.Int64Var(&cfg.CacheBytes, "plan-cache-bytes", 0, "transfer planner: largest copy kept on the caller's goroutine (0: the reference model's)")
	fs.Int64Var(&cfg.WorkerBytes, "plan-worker-bytes", 0, "transfer planner: least host copying worth one more goroutine (0: the default)")
	fs.DurationVar(&cfg.Linger, "helper-linger", 0, "how long copy helpers poll after a call (0: the default; negative: park at once)")
	pdl := fs.Bool("pdl", true, "use programmatic dependent launch where the device supports it (W5, W5G); false for an A/B")
	kernelReads := fs.Bool("kernel-reads", true, "let copy kernels write reads that follow a batch's kernels, into pinned memory or staging (W8); false for an A/B")
	kernelReadMax := sizeFlag(0)
	fs.Var(&kernelReadMax, "kernel-read-max", "largest batch read a copy kernel writes (0: the default, 2MiB), for an A/B")
	fs.StringVar(&cfg.Workloads, "workloads", cfg.Workloads, `workloads to run, e.g. "W1,W3", "all" or "none" (sweep only)`)
	fs.StringVar(&cfg.Out, "out", "", "directory for results.json and the plots (created if missing)")
	fs.StringVar(&cfg.MemorySnapshot, "memory-snapshot", "", "record memory history during the run and write the snapshot as JSON to this file, for memplot (the timings then include the recording)")
	memEvents := fs.Int("memory-events", 100000, "with -memory-snapshot: the most events the history keeps")
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: vyrecuda bench [flags]\n\nRuns the workloads W1-W7 (with W4B, the W4C churn, and W5G and W5C, CUDA graphs),\n"+
			"W8 (the inference step: upload, one kernel, read back, in five forms) and an\nupload/readback "+
			"bandwidth sweep (beside the driver's own pageable copy and the pinned DMA\nalone), and prints median, min and max over -repeats runs. The workloads,\n"+
			"their targets and the paths they measure are described in\ndocs/BENCHMARKS.md.\n\n")
		fs.PrintDefaults()
	}
	apply = func() {
		cfg.Device, cfg.Ordinal = string(*dev), *ordinal
		cfg.Small, cfg.Large, cfg.AllocSize = int(small), int(large), int(allocSize)
		cfg.SweepMin, cfg.SweepMax = int(sweepMin), int(sweepMax)
		cfg.MixedMax = int(mixedMax)
		cfg.W8Sizes = []int(w8Sizes)
		cfg.NoPDL, cfg.NoKernelReads, cfg.KernelReadMax = !*pdl, !*kernelReads, int(kernelReadMax)
		if cfg.MemorySnapshot != "" {
			cfg.MemoryEvents = *memEvents
		}
	}
	return fs, apply
}
