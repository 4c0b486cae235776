package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/internal/churn"
	"github.com/vyre-go/vyrecuda/xferplan"
)

// benchConfig is everything bench's flags set; it is written into
// results.json so a result says how it was produced.
type benchConfig struct {
	Device     string `json:"device"`
	Ordinal    int    `json:"ordinal"`
	Repeats    int    `json:"repeats"`
	Warmup     int    `json:"warmup"`
	Count      int    `json:"count"`           // small transfers in W1 and W3
	Small      int    `json:"small"`           // bytes of each small transfer
	Large      int    `json:"large"`           // bytes of the W2 upload and W6 download
	Allocs     int    `json:"allocs"`          // alloc+free pairs per W4 run
	AllocSize  int    `json:"alloc_size"`      // bytes per W4 allocation
	ChurnSteps int    `json:"churn_steps"`     // alloc/free steps per W4C run
	Launches   int    `json:"launches"`        // dependent launches per W5 run
	MixedCount int    `json:"mixed_count"`     // W7: buffers
	MixedMin   int    `json:"mixed_min"`       // W7: smallest buffer
	MixedMax   int    `json:"mixed_max"`       // W7: largest buffer
	SweepMin   int    `json:"sweep_min"`       // smallest transfer of the bandwidth sweep
	SweepMax   int    `json:"sweep_max"`       // largest transfer of the bandwidth sweep
	Workloads  string `json:"workloads"`       // comma-separated ids, or "all"
	W8Sizes    []int  `json:"w8_sizes"`        // W8: bytes each way
	W8Steps    int    `json:"w8_steps"`        // W8: measured steps per form and size
	W8Warmup   int    `json:"w8_warmup"`       // W8: unmeasured steps before them
	Peers      string `json:"peers,omitempty"` // W8: the PyTorch peer script's output file
	// CopyJob and Linger, when set, replace the transfer planner's
	// per-helper copy-job cost and the copy helpers' linger (experiments).
	CopyJob time.Duration `json:"plan_copy_job_ns,omitempty"`
	// DMASlowdown, when not negative, replaces the planner's DMASlowdown.
	DMASlowdown float64       `json:"plan_dma_slowdown"`
	Linger      time.Duration `json:"helper_linger_ns,omitempty"`
	Workers     int           `json:"plan_workers,omitempty"` // most copy goroutines per call (0: the default)
	// CacheBytes, when positive, replaces the planner's CacheBytes (copies
	// up to it stay on the caller); WorkerBytes, when positive, replaces the
	// least copying worth one more goroutine.
	CacheBytes  int64 `json:"plan_cache_bytes,omitempty"`
	WorkerBytes int64 `json:"plan_worker_bytes,omitempty"`
	// NoPDL turns programmatic dependent launch off (-pdl=false).
	NoPDL bool `json:"no_pdl,omitempty"`
	// NoKernelReads writes every read into pinned memory by DMA
	// (-kernel-reads=false; core.WithKernelReads).
	NoKernelReads bool `json:"no_kernel_reads,omitempty"`
	// KernelReadMax is the largest read a copy kernel writes
	// (-kernel-read-max; core.WithKernelReads); 0: the default.
	KernelReadMax int    `json:"kernel_read_max,omitempty"`
	Out           string `json:"-"`
	// MemoryEvents, when positive, records memory history with this bound
	// during the run (its cost is then in the timings); MemorySnapshot is
	// where the snapshot goes.
	MemoryEvents   int    `json:"memory_events,omitempty"`
	MemorySnapshot string `json:"-"`
}

// defaultBenchConfig holds the sizes of the benchmark workloads (docs/BENCHMARKS.md).
func defaultBenchConfig() benchConfig {
	return benchConfig{
		Device: deviceAuto, Repeats: 10, Warmup: 2,
		Count: 1024, Small: 4 << 10, Large: 256 << 20,
		Allocs: 1000, AllocSize: 4 << 10, ChurnSteps: churn.DefaultSteps, Launches: 100,
		MixedCount: 2048, MixedMin: 16, MixedMax: 256 << 10,
		SweepMin: 4 << 10, SweepMax: 256 << 20, Workloads: "all", DMASlowdown: -1,
		W8Sizes: []int{16 << 10, 128 << 10, 512 << 10, 2 << 20}, W8Steps: 200, W8Warmup: 20,
	}
}

// runBench parses bench's flags, runs the selected workloads and the sweep,
// prints the table and, with -out, writes results.json and bandwidth.svg.
func runBench(args []string, stdout, stderr io.Writer) int {
	cfg := defaultBenchConfig()
	fs, apply := benchFlags(&cfg, stderr)
	if code, done := parseFlags(fs, args, stderr); done {
		return code
	}
	apply()
	selected, err := cfg.validate()
	if err != nil {
		fmt.Fprintf(stderr, "vyrecuda bench: %v\n", err)
		return exitUsage
	}
	var peers *w8Peers
	if cfg.Peers != "" {
		// Read before the run, like -out is checked.
		if peers, err = readW8Peers(cfg.Peers); err != nil {
			return fail(stderr, "bench", err)
		}
	}

	if cfg.Out != "" {
		// Checked before the run: a run of minutes must not end in an unwritable directory.
		if err := checkOutDir(cfg.Out); err != nil {
			return fail(stderr, "bench", err)
		}
	}
	s, err := openSession(cfg.Device, cfg.Ordinal, cfg.simMemory(), cfg.options()...)
	if err != nil {
		return fail(stderr, "bench", err)
	}
	fmt.Fprintln(stdout, s.Describe())
	fmt.Fprintf(stdout, "programmatic dependent launch: %v\n", s.Backend.ProgrammaticLaunch())
	var rep *benchReport
	runErr := startMemoryHistory(s, cfg)
	if runErr == nil {
		rep, runErr = runBenchmarks(s, cfg, selected, peers, newProgress(stderr))
		runErr = errors.Join(runErr, writeMemorySnapshot(s, cfg))
	}
	if err := s.Close(); err != nil {
		runErr = errors.Join(runErr, err)
	}
	if runErr != nil {
		return fail(stderr, "bench", runErr)
	}
	rep.Command = "vyrecuda bench " + strings.Join(args, " ")
	printTable(stdout, rep)
	if cfg.Out != "" {
		if err := writeOutputs(cfg.Out, rep); err != nil {
			return fail(stderr, "bench", err)
		}
		fmt.Fprintf(stdout, "wrote %s\n", strings.Join(outputFiles(cfg.Out, rep), ", "))
	}
	return exitOK
}

// validate checks the numbers and resolves -workloads into the workloads to
// run, in W1..W8 order.
func (c *benchConfig) validate() ([]string, error) {
	switch {
	case c.Repeats < 1:
		return nil, fmt.Errorf("-repeats %d: want at least 1", c.Repeats)
	case c.Warmup < 0:
		return nil, fmt.Errorf("-warmup %d: want 0 or more", c.Warmup)
	case c.Count < 1:
		return nil, fmt.Errorf("-count %d: want at least 1", c.Count)
	case c.Allocs < 1:
		return nil, fmt.Errorf("-allocs %d: want at least 1", c.Allocs)
	case c.MemorySnapshot != "" && c.MemoryEvents < 1:
		return nil, fmt.Errorf("-memory-events %d: want at least 1", c.MemoryEvents)
	case c.ChurnSteps < 1:
		return nil, fmt.Errorf("-churn-steps %d: want at least 1", c.ChurnSteps)
	case c.Launches < 1:
		return nil, fmt.Errorf("-launches %d: want at least 1", c.Launches)
	case c.MixedCount < 1:
		return nil, fmt.Errorf("-mixed-count %d: want at least 1", c.MixedCount)
	case c.MixedMax < c.MixedMin:
		return nil, fmt.Errorf("-mixed-max %s: want at least %s", formatBytes(uint64(c.MixedMax)), formatBytes(uint64(c.MixedMin)))
	case c.SweepMin > c.SweepMax:
		return nil, fmt.Errorf("-sweep-min %s is above -sweep-max %s", formatBytes(uint64(c.SweepMin)), formatBytes(uint64(c.SweepMax)))
	case c.W8Steps < 1:
		return nil, fmt.Errorf("-w8-steps %d: want at least 1", c.W8Steps)
	case c.W8Warmup < 0:
		return nil, fmt.Errorf("-w8-warmup %d: want 0 or more", c.W8Warmup)
	}
	for _, n := range c.W8Sizes {
		if n%4 != 0 || n/4 > math.MaxUint32 {
			return nil, fmt.Errorf("-w8-sizes: %d bytes is not a whole number of float32 below 2^32 of them", n)
		}
	}
	all := append(workloadIDs(), w8ID)
	switch strings.TrimSpace(c.Workloads) {
	case "all", "":
		return all, nil
	case "none":
		return nil, nil
	}
	want := map[string]bool{}
	for _, id := range strings.Split(c.Workloads, ",") {
		id = strings.ToUpper(strings.TrimSpace(id))
		if !slices.Contains(all, id) {
			return nil, fmt.Errorf("-workloads: unknown workload %q; known: %s, all, none", id, strings.Join(all, ","))
		}
		want[id] = true
	}
	var out []string
	for _, id := range all {
		if want[id] {
			out = append(out, id)
		}
	}
	return out, nil
}

// options are the Backend options the experiment flags ask for.
func (c *benchConfig) options() []core.Option {
	var opts []core.Option
	if c.CopyJob > 0 || c.DMASlowdown >= 0 || c.CacheBytes > 0 {
		m := xferplan.Reference()
		if c.CopyJob > 0 {
			m.CopyJob = c.CopyJob
		}
		if c.CacheBytes > 0 {
			m.CacheBytes = c.CacheBytes
		}
		if c.DMASlowdown >= 0 {
			m.DMASlowdown = c.DMASlowdown
		}
		opts = append(opts, core.WithPlanModel(m))
	}
	if c.Linger != 0 {
		opts = append(opts, core.WithCopyHelperLinger(c.Linger))
	}
	if c.Workers > 0 || c.WorkerBytes > 0 {
		opts = append(opts, core.WithPlanTuning(xferplan.Tuning{MaxWorkers: c.Workers, WorkerBytes: c.WorkerBytes}))
	}
	if c.NoPDL {
		opts = append(opts, core.WithProgrammaticLaunch(false))
	}
	if c.NoKernelReads {
		opts = append(opts, core.WithKernelReads(0, -1))
	} else if c.KernelReadMax > 0 {
		opts = append(opts, core.WithKernelReads(0, c.KernelReadMax))
	}
	return opts
}

// simMemory sizes the simulated device so the largest transfer fits its
// budget three times over (the buffer, its source and what pools keep), plus
// the small buffers; zero keeps the default of 1 GiB.
func (c *benchConfig) simMemory() uint64 {
	big := uint64(max(c.Large, c.SweepMax))
	need := 3*big + 3*uint64(c.Count)*uint64(c.Small) + 3*uint64(c.MixedCount)*uint64(c.MixedMax) + 64<<20
	if need <= 1<<30 {
		return 0
	}
	return need
}

// sweepSizes returns the sweep's transfer sizes: SweepMin growing 4x, and
// SweepMax as the last point.
func (c *benchConfig) sweepSizes() []int {
	var out []int
	for n := c.SweepMin; n < c.SweepMax; n *= 4 {
		out = append(out, n)
		if n > c.SweepMax/4 {
			break
		}
	}
	return append(out, c.SweepMax)
}

// runBenchmarks runs the selected workloads (W8 last), then the sweep, on s;
// peers, when given, are PyTorch's W8 figures.
func runBenchmarks(s *session, cfg benchConfig, selected []string, peers *w8Peers, prog *progress) (*benchReport, error) {
	rep := &benchReport{
		Tool: "vyrecuda bench", Time: time.Now().UTC().Format(time.RFC3339),
		Device: deviceReport{
			Kind: s.Kind, Name: s.Info.Name, MemoryBytes: s.Info.TotalMemory,
			ComputeCapability: fmt.Sprintf("%d.%d", s.Info.CCMajor, s.Info.CCMinor), Reason: s.Reason,
		},
		Config: cfg, PeersW8: peers,
	}
	rep.setHost()
	sizes := cfg.sweepSizes()
	w8 := slices.Contains(selected, w8ID)
	selected = slices.DeleteFunc(slices.Clone(selected), func(id string) bool { return id == w8ID })
	total := len(selected) + 2*len(sizes)
	if w8 {
		total += len(cfg.W8Sizes) * len(w8Forms)
	}
	step := 0
	defer prog.done()
	for _, id := range selected {
		step++
		w := newWorkload(id, cfg)
		prog.start(step, total, w.ID+" "+w.Title)
		r, err := measureWorkload(s, w, cfg, prog)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", id, err)
		}
		rep.Workloads = append(rep.Workloads, r)
	}
	if w8 {
		rows, err := measureW8(s, cfg, peers, prog, &step, total)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", w8ID, err)
		}
		rep.W8 = rows
	}
	for _, dir := range []string{dirUpload, dirReadback} {
		for _, n := range sizes {
			step++
			prog.start(step, total, fmt.Sprintf("sweep %s %s", dir, formatBytes(uint64(n))))
			p, err := measureSweep(s, dir, n, cfg, prog)
			if err != nil {
				return nil, fmt.Errorf("sweep %s %s: %w", dir, formatBytes(uint64(n)), err)
			}
			if s.Kind == deviceCUDA && p.DriverPageableGBps > 0 {
				meets := p.GBps >= p.DriverPageableGBps
				p.Meets = &meets
			}
			rep.Sweep = append(rep.Sweep, p)
		}
	}
	return rep, nil
}

// measureWorkload prepares w, runs it Warmup+Repeats times and summarizes
// the measured runs.
func measureWorkload(s *session, w workload, cfg benchConfig, prog *progress) (workloadResult, error) {
	r := workloadResult{ID: w.ID, Title: w.Title, Bytes: w.Bytes, Ops: w.Ops, Target: w.Target.Text}
	body, cleanup, err := w.prepare(s.Backend)
	if err != nil {
		return r, err
	}
	m, err := repeat(s.Backend, body, cfg, prog)
	if cerr := cleanup(); cerr != nil {
		err = errors.Join(err, cerr)
	}
	if err != nil {
		return r, err
	}
	times, tel := m.times, m.tel
	r.Repeats = len(times)
	r.CPUMsPerGB = cpuMsPerGB(m.cpu, w.Bytes, len(times))
	st := summarize(times)
	r.MedianNs, r.MinNs, r.MaxNs = st.Median.Nanoseconds(), st.Min.Nanoseconds(), st.Max.Nanoseconds()
	r.PerOpNs = float64(r.MedianNs) / float64(max(w.Ops, 1))
	if w.Bytes > 0 {
		r.GBps = gbps(w.Bytes, st.Median)
	}
	r.PerRun = perRun(tel, len(times))
	if w.DMADir != "" {
		dma, err := pinnedDMA(s, w.DMADir, int(w.Bytes), cfg)
		if err != nil {
			return r, fmt.Errorf("pinned DMA baseline: %w", err)
		}
		r.PinnedDMANs = dma.Nanoseconds()
		r.Target = fmt.Sprintf("<= %.3g x pinned DMA (%s)", w.Target.MaxDMARatio, formatDuration(dma))
	}
	if s.Kind == deviceCUDA {
		meets := w.Target.met(r)
		r.Meets = &meets
	}
	return r, nil
}

// measureSweep times an upload or a readback of one n-byte buffer, then,
// in the same process and on the same buffer and Go slice, the driver's
// own pageable copy and the pinned DMA alone.
func measureSweep(s *session, dir string, n int, cfg benchConfig, prog *progress) (sp sweepPoint, err error) {
	b := s.Backend
	h, err := b.Alloc(n)
	if err != nil {
		return sweepPoint{}, err
	}
	defer func() {
		if ferr := b.Free(h); ferr != nil {
			err = errors.Join(err, ferr)
		}
	}()
	data := pattern(n, uint32(n))
	var body func() error
	if dir == dirUpload {
		body = func() error { return b.Upload(core.UploadAt{Buf: h, Data: data}) }
	} else {
		if err := b.Upload(core.UploadAt{Buf: h, Data: data}); err != nil {
			return sweepPoint{}, err
		}
		body = func() (err error) {
			data, err = b.Download(h.All(), data)
			return err
		}
	}
	m, err := repeat(b, body, cfg, prog)
	if err != nil {
		return sweepPoint{}, err
	}
	st := summarize(m.times)
	sp = sweepPoint{
		Direction: dir, Bytes: int64(n), Repeats: len(m.times),
		MedianNs: st.Median.Nanoseconds(), MinNs: st.Min.Nanoseconds(), MaxNs: st.Max.Nanoseconds(),
		GBps: gbps(int64(n), st.Median), CPUMsPerGB: cpuMsPerGB(m.cpu, int64(n), len(m.times)),
	}
	dev, err := b.ResidentDevicePtr(h)
	if err != nil {
		return sweepPoint{}, err
	}
	bl := baseline{drv: s.drv, dir: dir, dev: dev}
	pg, err := bl.pageable(data, cfg)
	if err != nil {
		return sweepPoint{}, fmt.Errorf("driver pageable baseline: %w", err)
	}
	dma, err := bl.pinned(n, cfg)
	if err != nil {
		return sweepPoint{}, fmt.Errorf("pinned DMA baseline: %w", err)
	}
	sp.DriverPageableGBps, sp.PinnedDMAGBps = gbps(int64(n), pg), gbps(int64(n), dma)
	return sp, nil
}

// measured is what repeat saw of the measured runs.
type measured struct {
	times []time.Duration
	tel   core.Telemetry
	cpu   time.Duration // process CPU time over all measured runs
}

// repeat runs body cfg.Warmup times unmeasured, then cfg.Repeats times
// measured, and returns the measured durations, the telemetry and the
// process CPU time of the measured runs.
func repeat(b *core.Backend, body func() error, cfg benchConfig, prog *progress) (measured, error) {
	for i := 0; i < cfg.Warmup; i++ {
		if err := body(); err != nil {
			return measured{}, err
		}
	}
	b.ResetTelemetry()
	times := make([]time.Duration, 0, cfg.Repeats)
	cpu0 := processCPU()
	for i := 0; i < cfg.Repeats; i++ {
		prog.tick(i+1, cfg.Repeats)
		start := time.Now()
		err := body()
		d := time.Since(start)
		if err != nil {
			return measured{}, err
		}
		// A clock too coarse to see the run would give 0; count it as 1 ns so
		// rates stay finite and the run is still visible as "too fast".
		times = append(times, max(d, time.Nanosecond))
	}
	cpu := processCPU() - cpu0
	return measured{times: times, tel: b.Telemetry(), cpu: cpu}, nil
}

// cpuMsPerGB is CPU milliseconds per GB moved, or 0 when unmeasured.
func cpuMsPerGB(cpu time.Duration, bytes int64, runs int) float64 {
	if cpu <= 0 || bytes <= 0 || runs <= 0 {
		return 0
	}
	return float64(cpu) / 1e6 / (float64(bytes) * float64(runs) / 1e9)
}

// gbps is bytes per nanosecond, which is GB/s (10^9 bytes per second).
func gbps(bytes int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(bytes) / float64(d.Nanoseconds())
}

// pattern returns n bytes that differ from buffer to buffer (seed) and from
// word to word, so a misplaced copy shows up in verification.
func pattern(n int, seed uint32) []byte {
	out := make([]byte, n)
	x := seed*2654435761 + 1
	for i := range out {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		out[i] = byte(x)
	}
	return out
}

// checkOutDir creates dir when missing and proves it writable by creating
// and removing a probe file in it, so -out fails before the run, not after.
func checkOutDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("-out %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, ".vyrecuda-probe-*")
	if err != nil {
		return fmt.Errorf("-out %s is not writable: %w", dir, err)
	}
	name := f.Name()
	return errors.Join(f.Close(), os.Remove(name))
}

// outputFiles lists the files writeOutputs writes for rep into dir.
func outputFiles(dir string, rep *benchReport) []string {
	out := []string{filepath.Join(dir, resultsFile), filepath.Join(dir, plotFile)}
	if len(rep.W8) > 0 {
		out = append(out, filepath.Join(dir, w8PlotFile))
	}
	return out
}

// writeOutputs writes results.json, bandwidth.svg and, when W8 ran, w8.svg
// into dir.
func writeOutputs(dir string, rep *benchReport) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := rep.marshal()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, resultsFile), js, 0o644); err != nil {
		return err
	}
	if err := writeSVG(filepath.Join(dir, plotFile), rep, writeBandwidthSVG); err != nil {
		return err
	}
	if len(rep.W8) == 0 {
		return nil
	}
	return writeSVG(filepath.Join(dir, w8PlotFile), rep, writeW8SVG)
}

// writeSVG creates the file at path and draws rep into it with draw.
func writeSVG(path string, rep *benchReport, draw func(io.Writer, *benchReport) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	werr := draw(f, rep)
	return errors.Join(werr, f.Close())
}
