package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// runCmd runs the command line and returns its status and outputs.
func runCmd(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// stub replaces *p with v for the rest of the test.
func stub[T any](t *testing.T, p *T, v T) {
	t.Helper()
	old := *p
	*p = v
	t.Cleanup(func() { *p = old })
}

// smallBench is a bench command line that runs in well under a second on sim.
var smallBench = []string{"bench", "-device", "sim", "-repeats", "3", "-warmup", "1", "-count", "16",
	"-small", "1KiB", "-large", "256KiB", "-allocs", "20", "-churn-steps", "300", "-launches", "7", "-sweep-min", "4KiB", "-sweep-max", "64KiB",
	"-mixed-count", "40", "-mixed-max", "16KiB", "-w8-sizes", "4KiB,16KiB", "-w8-steps", "5", "-w8-warmup", "1"}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		want string // in stderr
	}{
		{"no command", nil, exitUsage, "Usage:"},
		{"unknown command", []string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{"bad device", []string{"demo", "-device", "gpu"}, exitUsage, "want auto, sim or cuda"},
		{"stray argument", []string{"info", "extra"}, exitUsage, `unexpected argument "extra"`},
		{"unknown flag", []string{"bench", "-frobs", "3"}, exitUsage, "-frobs"},
		{"zero repeats", []string{"bench", "-repeats", "0"}, exitUsage, "-repeats 0"},
		{"negative warmup", []string{"bench", "-warmup", "-1"}, exitUsage, "-warmup -1"},
		{"zero count", []string{"bench", "-count", "0"}, exitUsage, "-count 0"},
		{"zero allocs", []string{"bench", "-allocs", "0"}, exitUsage, "-allocs 0"},
		{"zero launches", []string{"bench", "-launches", "0"}, exitUsage, "-launches 0"},
		{"bad size", []string{"bench", "-large", "lots"}, exitUsage, "want a positive size"},
		{"zero size", []string{"bench", "-small", "0"}, exitUsage, "want a positive size"},
		{"sweep reversed", []string{"bench", "-sweep-min", "1MiB", "-sweep-max", "4KiB"}, exitUsage, "is above -sweep-max"},
		{"unknown workload", []string{"bench", "-workloads", "W1,W9"}, exitUsage, `unknown workload "W9"`},
		{"demo words", []string{"demo", "-words", "0"}, exitUsage, "-words 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCmd(tt.args...)
			assert.Equal(t, tt.code, code)
			assert.Contains(t, stderr, tt.want)
			assert.Empty(t, stdout, "nothing runs on bad usage")
		})
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		code, stdout, _ := runCmd(args...)
		assert.Equal(t, exitOK, code, args)
		assert.Contains(t, stdout, "vyrecuda bench")
	}
	for _, cmd := range []string{"info", "demo", "bench", "allreduce"} {
		code, stdout, stderr := runCmd(cmd, "-h")
		assert.Equal(t, exitOK, code, cmd)
		assert.Empty(t, stdout)
		assert.Contains(t, stderr, "Usage: vyrecuda "+cmd)
	}
}

func TestInfo(t *testing.T) {
	t.Run("this machine", func(t *testing.T) {
		// Whatever the machine has, info succeeds and names the simulated device.
		code, stdout, stderr := runCmd("info")
		assert.Equal(t, exitOK, code, stderr)
		assert.Contains(t, stdout, "driver: ")
		assert.Contains(t, stdout, "simulated device: "+sim.DefaultName+": 1 GiB, compute capability 9.0")
	})
	tests := []struct {
		name    string
		devs    []core.DeviceSummary
		err     error
		code    int
		want    []string
		notWant string
	}{
		{
			name: "no driver", err: &core.Error{Op: "Devices", Kind: core.KindUnsupported, Err: cudaapi.ErrDriverNotFound},
			code: exitOK, want: []string{"driver: none", "no GPU: the simulated device is available"},
		},
		{
			name: "no device", err: &core.Error{Op: "Devices", Kind: core.KindDriver, Code: cudaapi.CUDA_ERROR_NO_DEVICE, Err: cudaapi.CUDA_ERROR_NO_DEVICE},
			code: exitOK, want: []string{"reports no CUDA device", "no GPU: the simulated device is available"},
		},
		{
			name: "two GPUs",
			devs: []core.DeviceSummary{
				{Ordinal: 0, Name: "NVIDIA H200", TotalMemory: 150 << 30, CCMajor: 9, CCMinor: 0, DriverVersion: 13000,
					Capabilities: sim.DefaultCapabilities()},
				{Ordinal: 1, Name: "NVIDIA L4", TotalMemory: 24 << 30, CCMajor: 8, CCMinor: 9, DriverVersion: 13000,
					Capabilities: core.Capabilities{DriverVersion: 13000, Graphs: true, MemoryPools: true}},
			},
			code: exitOK,
			want: []string{"driver: CUDA 13.0", "devices: 2", "[0] NVIDIA H200: 150 GiB, compute capability 9.0\n" +
				"      offers: batched copies, stream-ordered memory pools, graphs, conditional graph nodes, virtual memory management, peer access, programmatic dependent launch, mapped pinned host memory\n",
				"[1] NVIDIA L4: 24 GiB, compute capability 8.9\n      offers: stream-ordered memory pools, graphs; " +
					"lacks: batched copies, conditional graph nodes, virtual memory management, peer access, programmatic dependent launch, mapped pinned host memory\n"},
			notWant: "no GPU",
		},
		{
			name: "driver failure", err: &core.Error{Op: "Devices", Kind: core.KindDriver, Code: cudaapi.CUDA_ERROR_UNKNOWN, Err: cudaapi.CUDA_ERROR_UNKNOWN},
			code: exitFail, want: []string{"listing its devices failed"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stub(t, &listDevices, func() ([]core.DeviceSummary, error) { return tt.devs, tt.err })
			stub(t, &openDrivers, func(int) ([]core.Driver, error) { return nil, errors.New("no peer drivers in this test") })
			code, stdout, _ := runCmd("info")
			assert.Equal(t, tt.code, code)
			for _, w := range tt.want {
				assert.Contains(t, stdout, w)
			}
			if tt.notWant != "" {
				assert.NotContains(t, stdout, tt.notWant)
			}
		})
	}
}

func TestOpenSessionChoosesDevice(t *testing.T) {
	errNoGPU := errors.New("no gpu here")
	probedGPU := core.DeviceChoice{Reason: "the CUDA driver reports 1 device(s)"}
	tests := []struct {
		name       string
		choice     string
		probe      core.DeviceChoice
		open       error
		wantKind   string
		wantReason string
		wantErr    bool
	}{
		{name: "auto without driver", choice: deviceAuto, probe: core.DeviceChoice{Sim: true, Reason: "no CUDA driver found"}, wantKind: deviceSim, wantReason: "no CUDA driver found"},
		{name: "auto when opening fails", choice: deviceAuto, probe: probedGPU, open: errNoGPU, wantKind: deviceSim, wantReason: "opening CUDA device 0 failed: no gpu here"},
		{name: "auto as VYRECUDA_DEVICE says", choice: deviceAuto, probe: core.DeviceChoice{Sim: true, Env: "sim", Reason: "VYRECUDA_DEVICE=sim"}, open: errNoGPU, wantKind: deviceSim, wantReason: "VYRECUDA_DEVICE=sim"},
		{name: "VYRECUDA_DEVICE=cuda refuses to fall back", choice: deviceAuto, probe: core.DeviceChoice{Env: "cuda", Reason: "VYRECUDA_DEVICE=cuda"}, open: errNoGPU, wantErr: true},
		{name: "sim", choice: deviceSim, probe: probedGPU, wantKind: deviceSim},
		{name: "cuda refuses to fall back", choice: deviceCUDA, open: errNoGPU, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stub(t, &chooseDevice, func() (core.DeviceChoice, error) { return tt.probe, nil })
			stub(t, &openCUDA, func(int, ...core.Option) (*core.Backend, core.Driver, error) { return nil, nil, tt.open })
			s, err := openSession(tt.choice, 0, 0)
			if tt.wantErr {
				assert.ErrorIs(t, err, errNoGPU)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.wantKind, s.Kind)
			assert.Equal(t, tt.wantReason, s.Reason)
			assert.Contains(t, s.Describe(), "simulated (no GPU needed)")
			require.NoError(t, s.Close())
		})
	}
}

// A bad VYRECUDA_DEVICE stops -device auto with core's error.
func TestAutoRefusesABadVyrecudaDevice(t *testing.T) {
	t.Setenv(core.DeviceEnv, "gpu")
	code, stdout, stderr := runCmd("demo", "-words", "16")
	assert.Equal(t, exitFail, code)
	assert.Empty(t, stdout)
	assert.Contains(t, stderr, `VYRECUDA_DEVICE is "gpu"`)
}

func TestDemoExplicitCUDAWithoutGPUFails(t *testing.T) {
	stub(t, &openCUDA, func(int, ...core.Option) (*core.Backend, core.Driver, error) {
		return nil, nil, &core.Error{Op: "OpenCUDA", Kind: core.KindUnsupported, Err: cudaapi.ErrDriverNotFound}
	})
	code, stdout, stderr := runCmd("demo", "-device", "cuda")
	assert.Equal(t, exitFail, code)
	assert.Empty(t, stdout)
	assert.Contains(t, stderr, "vyrecuda demo: ")
	assert.Contains(t, stderr, "CUDA driver library not found")
}

func TestDemoOnSim(t *testing.T) {
	code, stdout, stderr := runCmd("demo", "-device", "sim", "-words", "1000")
	require.Equal(t, exitOK, code, stderr)
	for _, want := range []string{
		"device: simulated (no GPU needed)",
		"1000 uint32 words (3.9 KiB) per buffer",
		"pass 1: static b uploaded (3.9 KiB); 0 of 5 buffers reused",
		// The warm pass: no new device memory, only a uploaded, one fence.
		"pass 2: static b from the cache (nothing uploaded); 5 of 5 buffers reused from the optimizer pool, resident bytes +0 B; " +
			"3.9 KiB up, 3.9 KiB down, sync points: 1;",
		"verified 1000 words",
		// Per pass 8 upload chunks and 4 read ranges, plus the static upload:
		// 25 copies requested; fused, one upload and one readback per pass.
		"copies: 25 requested, 5 after fusion",
		"kernel launches: 8, device memsets: 2",
		"sync points: 3",
		"optimizer pool: 5 buffers",
		"static cache: 1 set",
		"result: OK",
	} {
		assert.Contains(t, stdout, want)
	}
	assert.Empty(t, stderr)
}

func TestDemoFailsCleanlyOnDeviceFaults(t *testing.T) {
	for _, op := range []sim.Op{sim.OpMemAlloc, sim.OpMemcpyHtoDAsync, sim.OpLaunch, sim.OpMemcpyDtoHAsync, sim.OpStreamSynchronize} {
		t.Run(op.String(), func(t *testing.T) {
			dev := sim.New(sim.Config{})
			b, err := core.Open(dev)
			require.NoError(t, err)
			dev.FailNth(op, 2, cudaapi.CUDA_ERROR_UNKNOWN)
			err = demo(b, 256, io.Discard)
			assert.ErrorIs(t, err, core.ErrDriver)
			require.NoError(t, b.Close())
			sim.RequireNoLeaks(t, dev)
		})
	}
}

func TestVerifyWords(t *testing.T) {
	want := []uint32{1, 2, 0xdeadbeef, 4}
	good := []byte{1, 0, 0, 0, 2, 0, 0, 0, 0xef, 0xbe, 0xad, 0xde, 4, 0, 0, 0}
	tests := []struct {
		name    string
		got     []byte
		wantErr string
	}{
		{"equal", good, ""},
		{"one word wrong", append(append([]byte{}, good[:8]...), 0, 0, 0, 0, 4, 0, 0, 0), "1 of 4 words differ from the CPU; first at word 2: got 0x0, want 0xdeadbeef"},
		{"two words wrong", append([]byte{9, 0, 0, 0, 9, 0, 0, 0}, good[8:]...), "2 of 4 words differ from the CPU; first at word 0"},
		{"short", good[:12], "read 12 bytes, want 16"},
		{"empty", nil, "read 0 bytes, want 16"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := verifyWords("out", tt.got, want)
			if tt.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wantErr)
		})
	}
}

func TestBenchOnSim(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	code, stdout, stderr := runCmd(append(smallBench, "-out", dir)...)
	require.Equal(t, exitOK, code, stderr)

	for _, want := range []string{"W1 upload 16 x 1 KiB into 16 resident buffers", "W2 upload 256 KiB from a Go slice",
		"W3 read back 16 x 1 KiB from 16 buffers", "W4 pooled alloc+free", "W4B pooled alloc+free", "W4C churn: 300 random alloc/free", "W5 7 dependent tiny launches + 1 fence",
		"W5G 7 dependent tiny launches replayed from a CUDA graph + 1 fence", "W5C capture of W5's 7 launches",
		"W6 download 256 KiB into a Go slice", "16 -> 16 copies", "7 launches", "upload    64 KiB", "readback  4 KiB",
		"W7U upload 40 buffers of 16 B-16 KiB", "W7D read back 40 buffers", "x pageable", "of DMA",
		"targets are not judged", "wrote " + filepath.Join(dir, resultsFile)} {
		assert.Contains(t, stdout, want)
	}
	// stderr is not a terminal here: one progress line per step (W8: one
	// per form and size).
	steps := len(workloadIDs()) + 2*len(w8Forms) + 2*3
	assert.Equal(t, steps, strings.Count(stderr, "bench: ["), stderr)
	assert.Contains(t, stderr, fmt.Sprintf("bench: [1/%d] W1 upload", steps))

	js, err := os.ReadFile(filepath.Join(dir, resultsFile))
	require.NoError(t, err)
	var rep benchReport
	require.NoError(t, json.Unmarshal(js, &rep))
	assert.Equal(t, deviceSim, rep.Device.Kind)
	assert.Equal(t, 3, rep.Config.Repeats)
	var ids []string
	for _, w := range rep.Workloads {
		ids = append(ids, w.ID)
		assert.Equal(t, 3, w.Repeats, w.ID)
		assert.Positive(t, w.MedianNs, w.ID)
		assert.Positive(t, w.PerOpNs, w.ID)
		assert.LessOrEqual(t, w.MinNs, w.MedianNs, w.ID)
		assert.LessOrEqual(t, w.MedianNs, w.MaxNs, w.ID)
		assert.Nil(t, w.Meets, "targets are not judged on sim")
		if w.Bytes > 0 {
			assert.Positive(t, w.GBps, w.ID)
			assert.Positive(t, w.PerRun.HostToDeviceBytes+w.PerRun.DeviceToHostBytes, w.ID)
			if w.ID == "W2" || w.ID == "W6" {
				// Staged in chunks: a readback waits for each chunk's DMA;
				// an upload once at the end, plus once per reused block.
				assert.GreaterOrEqual(t, w.PerRun.SyncPoints, 1.0, w.ID)
				if w.ID == "W6" {
					assert.InDelta(t, w.PerRun.DeviceCopies, w.PerRun.SyncPoints, 0, w.ID)
				} else {
					assert.LessOrEqual(t, w.PerRun.SyncPoints, w.PerRun.DeviceCopies, w.ID)
				}
			} else {
				assert.InDelta(t, 1, w.PerRun.SyncPoints, 0, "%s: one fence per run", w.ID)
			}
		}
		if strings.HasPrefix(w.ID, "W7") {
			assert.Positive(t, w.PinnedDMANs, "%s: judged against the pinned DMA", w.ID)
			assert.Contains(t, w.Target, "pinned DMA", w.ID)
		}
	}
	assert.Equal(t, workloadIDs(), ids)
	require.Len(t, rep.Sweep, 6)
	for i, p := range rep.Sweep {
		dir := dirUpload
		if i >= 3 {
			dir = dirReadback
		}
		assert.Equal(t, dir, p.Direction)
		assert.Equal(t, int64(4<<10)<<(2*(i%3)), p.Bytes)
		assert.Positive(t, p.DriverPageableGBps, "the sim copies pageable memory too")
		assert.Positive(t, p.PinnedDMAGBps)
		assert.Nil(t, p.Meets, "the pageable copy is not a target on sim")
		assert.Positive(t, p.GBps)
		assert.Positive(t, p.MedianNs)
	}

	svg, err := os.ReadFile(filepath.Join(dir, plotFile))
	require.NoError(t, err)
	require.NotEmpty(t, svg)
	root, elems := parseXML(t, svg)
	assert.Equal(t, "svg", root)
	assert.Equal(t, 6, elems["polyline"], "per direction: ours, driver pageable, pinned DMA")
	assert.Equal(t, 18, elems["circle"], "one point per sweep size, direction and series")
	assert.Contains(t, string(svg), "transfer size (bytes, log scale)")
	assert.Contains(t, string(svg), "bandwidth (GB/s)")
}

// parseXML checks that data is well-formed XML and returns the root element's
// name and a count of every element name.
func parseXML(t *testing.T, data []byte) (string, map[string]int) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(data))
	root, counts := "", map[string]int{}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
			}
			counts[se.Name.Local]++
		}
	}
	return root, counts
}

func TestBenchWorkloadSelection(t *testing.T) {
	code, stdout, stderr := runCmd(append(smallBench, "-workloads", "w5, W2", "-sweep-max", "4KiB")...)
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stdout, "W2 upload")
	assert.Contains(t, stdout, "W5 7 dependent")
	assert.NotContains(t, stdout, "W1 ")
	assert.Equal(t, 2+2, strings.Count(stderr, "bench: ["))

	code, stdout, stderr = runCmd(append(smallBench, "-workloads", "none", "-sweep-max", "4KiB")...)
	require.Equal(t, exitOK, code, stderr)
	assert.NotContains(t, stdout, "workload")
	assert.Contains(t, stdout, "sweep")
}

func TestBenchFailsCleanlyOnDeviceFaults(t *testing.T) {
	cfg := defaultBenchConfig()
	cfg.Repeats, cfg.Warmup, cfg.Count, cfg.Small, cfg.Large = 2, 1, 8, 1<<10, 64<<10
	cfg.Allocs, cfg.Launches, cfg.SweepMin, cfg.SweepMax = 5, 3, 4<<10, 16<<10
	tests := []struct {
		op   sim.Op
		nth  int
		want string
	}{
		{sim.OpMemAlloc, 1, "W1: "},
		{sim.OpMemcpyHtoDAsync, 2, "W1: "},
		{sim.OpMemcpyDtoHAsync, 3, "W1G: "}, // W1G's check reads its buffers back
		{sim.OpMemcpyDtoHAsync, 11, "W3: "},
		{sim.OpLaunch, 5, "W5: "},
		{sim.OpStreamSynchronize, 12, ""},
	}
	for _, tt := range tests {
		t.Run(tt.op.String(), func(t *testing.T) {
			s, err := openSimSession(0, "", nil)
			require.NoError(t, err)
			s.sim.FailNth(tt.op, tt.nth, cudaapi.CUDA_ERROR_UNKNOWN)
			ids, err := cfg.validate()
			require.NoError(t, err)
			rep, err := runBenchmarks(s, cfg, ids, nil, newProgress(io.Discard))
			assert.Nil(t, rep)
			require.ErrorIs(t, err, core.ErrDriver)
			assert.Contains(t, err.Error(), tt.want)
			require.NoError(t, s.Close(), "bench must release everything it allocated, also on failure")
		})
	}
}

func TestSummarize(t *testing.T) {
	us := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Microsecond
		}
		return out
	}
	tests := []struct {
		in               []time.Duration
		median, min, max time.Duration
	}{
		{us(5), 5 * time.Microsecond, 5 * time.Microsecond, 5 * time.Microsecond},
		{us(9, 1, 5), 5 * time.Microsecond, time.Microsecond, 9 * time.Microsecond},
		{us(4, 1, 2, 10), 3 * time.Microsecond, time.Microsecond, 10 * time.Microsecond},
	}
	for _, tt := range tests {
		in := append([]time.Duration(nil), tt.in...)
		got := summarize(tt.in)
		assert.Equal(t, stats{tt.median, tt.min, tt.max}, got)
		assert.Equal(t, in, tt.in, "summarize must not reorder its input")
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in      string
		want    int
		wantErr bool
	}{
		{"4096", 4096, false}, {"4KiB", 4096, false}, {"4K", 4096, false}, {"256MiB", 256 << 20, false},
		{"1GiB", 1 << 30, false}, {"7B", 7, false}, {" 2 MiB ", 2 << 20, false},
		{"0", 0, true}, {"-4", 0, true}, {"1.5MiB", 0, true}, {"KiB", 0, true}, {"lots", 0, true},
		{"9999999999999GiB", 0, true},
	}
	for _, tt := range tests {
		got, err := parseSize(tt.in)
		if tt.wantErr {
			assert.Error(t, err, tt.in)
			continue
		}
		require.NoError(t, err, tt.in)
		assert.Equal(t, tt.want, got, tt.in)
	}
}

func TestSweepSizes(t *testing.T) {
	tests := []struct {
		min, max int
		want     []int
	}{
		{4 << 10, 4 << 10, []int{4 << 10}},
		{4 << 10, 64 << 10, []int{4 << 10, 16 << 10, 64 << 10}},
		{4 << 10, 100 << 10, []int{4 << 10, 16 << 10, 64 << 10, 100 << 10}},
		{1 << 40, 1<<62 + 1, []int{1 << 40, 1 << 42, 1 << 44, 1 << 46, 1 << 48, 1 << 50, 1 << 52, 1 << 54, 1 << 56, 1 << 58, 1 << 60, 1 << 62, 1<<62 + 1}},
	}
	for _, tt := range tests {
		c := benchConfig{SweepMin: tt.min, SweepMax: tt.max}
		assert.Equal(t, tt.want, c.sweepSizes())
	}
}

func TestTargetMet(t *testing.T) {
	tests := []struct {
		t    target
		r    workloadResult
		want bool
	}{
		{target{MaxRun: 300 * time.Microsecond}, workloadResult{MedianNs: 300_000}, true},
		{target{MaxRun: 300 * time.Microsecond}, workloadResult{MedianNs: 300_001}, false},
		{target{MaxPerOp: 500 * time.Nanosecond}, workloadResult{PerOpNs: 499.5}, true},
		{target{MaxPerOp: 500 * time.Nanosecond}, workloadResult{PerOpNs: 500.5}, false},
		{target{MinGBps: 35}, workloadResult{GBps: 35}, true},
		{target{MinGBps: 35}, workloadResult{GBps: 34.9}, false},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.t.met(tt.r), "%+v %+v", tt.t, tt.r)
	}
}

func TestPlotWithoutPointsIsValidSVG(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, writeBandwidthSVG(&buf, &benchReport{Device: deviceReport{Name: `a <b> & "c"`, Kind: deviceSim}}))
	root, elems := parseXML(t, buf.Bytes())
	assert.Equal(t, "svg", root)
	assert.Zero(t, elems["polyline"])
	assert.Contains(t, buf.String(), "a &lt;b&gt; &amp;")
}

func TestNiceAxis(t *testing.T) {
	tests := []struct{ v, top, step float64 }{
		{0, 1, 0.25}, {1, 1, 0.2}, {7.3, 8, 2}, {53.6, 60, 20}, {12, 15, 5}, {250, 250, 50},
	}
	for _, tt := range tests {
		top, step := niceAxis(tt.v)
		assert.InDelta(t, tt.top, top, 1e-9, "top for %v", tt.v)
		assert.InDelta(t, tt.step, step, 1e-9, "step for %v", tt.v)
		assert.GreaterOrEqual(t, top, tt.v)
	}
}

func TestFormatBytes(t *testing.T) {
	for in, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 4096: "4 KiB", 4000: "3.9 KiB", 256 << 20: "256 MiB", 3 << 29: "1.5 GiB"} {
		assert.Equal(t, want, formatBytes(in))
	}
}

func TestBenchOutIntoAFileFails(t *testing.T) {
	file := filepath.Join(t.TempDir(), "taken")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o644))
	for _, out := range []string{file, filepath.Join(file, "sub")} {
		code, stdout, stderr := runCmd(append(smallBench, "-workloads", "W2", "-sweep-max", "4KiB", "-out", out)...)
		assert.Equal(t, exitFail, code)
		assert.Empty(t, stdout, "-out is checked before the device is opened and the run starts")
		assert.Contains(t, stderr, "vyrecuda bench: -out "+out)
	}
}

func TestBenchOutUnwritableDirFailsBeforeTheRun(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes into read-only directories")
	}
	dir := filepath.Join(t.TempDir(), "ro")
	require.NoError(t, os.Mkdir(dir, 0o500))
	code, stdout, stderr := runCmd(append(smallBench, "-workloads", "W2", "-sweep-max", "4KiB", "-out", dir)...)
	assert.Equal(t, exitFail, code)
	assert.Empty(t, stdout)
	assert.Contains(t, stderr, "is not writable")
}

func TestBenchOutLeavesNoProbe(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "out")
	code, _, stderr := runCmd(append(smallBench, "-workloads", "W2", "-sweep-max", "4KiB", "-out", dir)...)
	require.Equal(t, exitOK, code, stderr)
	names, err := os.ReadDir(dir)
	require.NoError(t, err)
	var got []string
	for _, n := range names {
		got = append(got, n.Name())
	}
	assert.ElementsMatch(t, []string{resultsFile, plotFile}, got)
}
