package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
	"github.com/vyre-go/vyrecuda/cudaapi"
)

// peerOutput is what the PyTorch peer script prints (its format, made-up
// figures), with a size W8 does not run and one it runs without a figure.
const peerOutput = `torch 2.11.0+cu130 on NVIDIA H100 80GB HBM3
torch W8    16384 B each way: pageable     36.0 us  pinned     25.5 us  graph     23.0 us
torch W8   131072 B each way: pageable     57.0 us  pinned     24.0 us  graph     27.0 us
torch W8  2097152 B each way: pageable    394.0 us  pinned     97.0 us  graph     97.0 us
`

// w8Bench is a bench command line that runs only W8, briefly, on sim.
func w8Bench(extra ...string) []string {
	return append([]string{"bench", "-device", "sim", "-workloads", "W8", "-sweep-max", "4KiB", "-repeats", "2", "-warmup", "0",
		"-w8-sizes", "16KiB,128KiB,64KiB", "-w8-steps", "7", "-w8-warmup", "2"}, extra...)
}

func TestBenchW8OnSim(t *testing.T) {
	dir := t.TempDir()
	peers := filepath.Join(dir, "peers.txt")
	require.NoError(t, os.WriteFile(peers, []byte(peerOutput), 0o644))
	out := filepath.Join(dir, "out")
	code, stdout, stderr := runCmd(w8Bench("-peers", peers, "-out", out)...)
	require.Equal(t, exitOK, code, stderr)
	for _, want := range []string{"W8 inference step", "median of 7 steps after 2 warm-up, every form's output checked",
		"PyTorch beside it (-peers " + peers + "): torch 2.11.0+cu130 on NVIDIA H100 80GB HBM3", "Graph.Replay from Backend-pinned memory",
		"pageable 36 us", "graph 27 us", "wrote " + filepath.Join(out, resultsFile)} {
		assert.Contains(t, stdout, want)
	}
	assert.Equal(t, 3*len(w8Forms)+2, strings.Count(stderr, "bench: ["), "a step per form and size, then the sweep")

	js, err := os.ReadFile(filepath.Join(out, resultsFile))
	require.NoError(t, err)
	var rep benchReport
	require.NoError(t, json.Unmarshal(js, &rep))
	require.Len(t, rep.W8, 3*len(w8Forms), "every form at every size, the floor included (through the simulator's seam)")
	require.NotNil(t, rep.PeersW8)
	for i, r := range rep.W8 {
		form := w8Forms[i%len(w8Forms)]
		size := []int64{16 << 10, 128 << 10, 64 << 10}[i/len(w8Forms)]
		name := fmt.Sprintf("%s %d", r.Form, r.Bytes)
		assert.Equal(t, form.ID, r.Form, name)
		assert.Equal(t, size, r.Bytes, name)
		assert.True(t, r.Verified, name)
		assert.Equal(t, 7, r.Steps, name)
		assert.Positive(t, r.MedianNs, name)
		assert.LessOrEqual(t, r.MinNs, r.MedianNs, name)
		assert.LessOrEqual(t, r.MedianNs, r.MaxNs, name)
		assert.InDelta(t, float64(r.MedianNs)/float64(medianOf(t, rep.W8, w8Calls, r.Bytes)), r.XCalls, 1e-9, name)
		assert.InDelta(t, float64(r.MedianNs)/float64(medianOf(t, rep.W8, w8Floor, r.Bytes)), r.XFloor, 1e-9, name)
		assert.Nil(t, r.Meets, "targets are not judged on sim")
		switch r.Form {
		case w8Floor:
			assert.Zero(t, r.SyncsPerStep, "the floor bypasses the Backend")
		case w8Calls:
			assert.GreaterOrEqual(t, r.SyncsPerStep, 3.0, "three fenced calls")
		default:
			assert.GreaterOrEqual(t, r.SyncsPerStep, 1.0, name)
		}
		assert.Equal(t, form.Peer, r.Peer, name)
		switch {
		case form.Peer == "" || r.Bytes == 64<<10: // no PyTorch form, or no figure at this size
			assert.Zero(t, r.PeerNs, name)
			assert.Zero(t, r.XPeer, name)
		default:
			assert.Equal(t, rep.PeersW8.median(r.Bytes, form.Peer), r.PeerNs, name)
			assert.Positive(t, r.PeerNs, name)
			assert.InDelta(t, float64(r.MedianNs)/float64(r.PeerNs), r.XPeer, 1e-9, name)
		}
	}

	svg, err := os.ReadFile(filepath.Join(out, w8PlotFile))
	require.NoError(t, err)
	root, elems := parseXML(t, svg)
	assert.Equal(t, "svg", root)
	assert.Equal(t, len(w8Forms)+3, elems["polyline"], "one line per form and per PyTorch form")
	assert.Contains(t, string(svg), "time per step (us)")
}

// medianOf returns the median of form at n bytes among rows.
func medianOf(t *testing.T, rows []w8Row, form string, n int64) int64 {
	t.Helper()
	for _, r := range rows {
		if r.Form == form && r.Bytes == n {
			return r.MedianNs
		}
	}
	t.Fatalf("no %s row at %d bytes", form, n)
	return 0
}

// TestBenchW8RefusesWrongOutput makes the kernel's twin compute the wrong
// thing, or the right thing only once, and expects the check to fail the
// bench: a W8 row is only written for output that matched the CPU.
func TestBenchW8RefusesWrongOutput(t *testing.T) {
	right := w8Twin
	tests := []struct {
		name string
		twin func() core.HostKernel
	}{
		{"no shift", func() core.HostKernel {
			return func(mem core.KernelMemory, cfg core.LaunchConfig, args []core.KernelArg) error {
				args = append([]core.KernelArg(nil), args...)
				args[3] = core.KernelArg{Type: core.ParamFloat32}
				return right(mem, cfg, args)
			}
		}},
		{"stale after the first launch", func() core.HostKernel {
			launched := false
			return func(mem core.KernelMemory, cfg core.LaunchConfig, args []core.KernelArg) error {
				if launched {
					return nil
				}
				launched = true
				return right(mem, cfg, args)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stub(t, &w8Twin, tt.twin())
			code, stdout, stderr := runCmd(w8Bench()...)
			assert.Equal(t, exitFail, code)
			assert.NotContains(t, stdout, "W8 inference step", "no table for a failed bench")
			assert.Contains(t, stderr, "vyrecuda bench: W8: 16 KiB run: verify W8 16 KiB run: ")
			assert.Contains(t, stderr, "differ from the CPU")
			assert.Contains(t, stderr, "the output is not x*3+0.5 of the input")
		})
	}
}

// TestBenchW8FailsCleanlyOnDeviceFaults fails each driver call W8 makes,
// at every occurrence in turn, until the bench gets through: every failure
// reaches the caller, and the session closes with nothing left on the device.
func TestBenchW8FailsCleanlyOnDeviceFaults(t *testing.T) {
	cfg := defaultBenchConfig()
	cfg.W8Sizes, cfg.W8Steps, cfg.W8Warmup = []int{4 << 10}, 2, 1
	ops := []sim.Op{sim.OpMemAlloc, sim.OpHostAlloc, sim.OpStreamCreate, sim.OpModuleLoad, sim.OpModuleFunction, sim.OpBindHostKernel,
		sim.OpMemcpyHtoDAsync, sim.OpLaunch, sim.OpMemcpyDtoHAsync, sim.OpStreamSynchronize, sim.OpGraphInstantiate, sim.OpGraphLaunch}
	for _, op := range ops {
		t.Run(op.String(), func(t *testing.T) {
			failed := 0
			for nth := 1; ; nth++ {
				require.Less(t, nth, 500, "the bench never got through")
				s, err := openSimSession(0, "", nil)
				require.NoError(t, err)
				s.sim.FailNth(op, nth, cudaapi.CUDA_ERROR_UNKNOWN)
				step := 0
				rows, err := measureW8(s, cfg, nil, newProgress(io.Discard), &step, len(w8Forms))
				s.sim.ClearFaults()
				require.NoError(t, s.Close(), "%s #%d: W8 must release everything it allocated, also on failure", op, nth)
				if err == nil {
					require.Len(t, rows, len(w8Forms))
					break
				}
				failed++
				assert.Nil(t, rows)
				var res cudaapi.Result
				require.True(t, errors.As(err, &res), "%s #%d: %v", op, nth, err)
				assert.Equal(t, cudaapi.CUDA_ERROR_UNKNOWN, res)
			}
			assert.Positive(t, failed, "%s: W8 makes this call, so failing it must fail the bench", op)
		})
	}
}

func TestW8BenchUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-w8-steps", "0"}, "-w8-steps 0: want at least 1"},
		{[]string{"-w8-warmup", "-1"}, "-w8-warmup -1"},
		{[]string{"-w8-sizes", "16KiB,6"}, "-w8-sizes: 6 bytes is not a whole number of float32"},
		{[]string{"-w8-sizes", "16KiB,,4KiB"}, "want a positive size"},
	}
	for _, tt := range tests {
		code, stdout, stderr := runCmd(append([]string{"bench"}, tt.args...)...)
		assert.Equal(t, exitUsage, code, tt.args)
		assert.Contains(t, stderr, tt.want)
		assert.Empty(t, stdout)
	}
}

func TestBenchW8PeersFileProblemsFailBeforeTheRun(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.txt")
	require.NoError(t, os.WriteFile(empty, []byte("torch 2.11 on NVIDIA H100\nTraceback (most recent call last):\n"), 0o644))
	for file, want := range map[string]string{
		filepath.Join(dir, "missing.txt"): "no such file",
		empty:                             `no "torch W8 N B each way`,
	} {
		code, stdout, stderr := runCmd(w8Bench("-peers", file)...)
		assert.Equal(t, exitFail, code)
		assert.Empty(t, stdout, "-peers is read before the device is opened")
		assert.Contains(t, stderr, "vyrecuda bench: -peers")
		assert.Contains(t, stderr, want)
	}
}

func TestParseW8Peers(t *testing.T) {
	p, err := parseW8Peers(strings.NewReader("some warning\n" + peerOutput + "trailing line\n"))
	require.NoError(t, err)
	assert.Equal(t, "torch 2.11.0+cu130 on NVIDIA H100 80GB HBM3", p.Source)
	assert.Equal(t, []w8Peer{
		{Bytes: 16384, PageableNs: 36000, PinnedNs: 25500, GraphNs: 23000},
		{Bytes: 131072, PageableNs: 57000, PinnedNs: 24000, GraphNs: 27000},
		{Bytes: 2097152, PageableNs: 394000, PinnedNs: 97000, GraphNs: 97000},
	}, p.Rows)
	assert.Equal(t, int64(25500), p.median(16384, peerPinned))
	assert.Zero(t, p.median(4096, peerPinned), "no figure at that size")
	assert.Zero(t, p.median(16384, "eager"), "no such form")

	_, err = parseW8Peers(strings.NewReader("torch W8 99999999999999999999 B each way: pageable 1.0 us  pinned 1.0 us  graph 1.0 us\n"))
	assert.ErrorContains(t, err, "value out of range")
}

func TestJudgeW8(t *testing.T) {
	peers := &w8Peers{Rows: []w8Peer{{Bytes: 128 << 10, PageableNs: 100_000, PinnedNs: 40_000, GraphNs: 30_000}}}
	row := func(form string, n, ns int64) w8Row { return w8Row{Form: form, Bytes: n, MedianNs: ns} }
	rows := []w8Row{
		row(w8Run, 128<<10, 80_000),       // 0.8x pageable: meets
		row(w8RunPinned, 128<<10, 40_000), // 1.0x pinned, 1.33x floor: misses on the floor
		row(w8Replay, 128<<10, 30_000),    // 1.0x graph, 1.0x floor: meets
		row(w8Calls, 128<<10, 50_000),
		row(w8Floor, 128<<10, 30_000),
		row(w8Run, 16<<10, 10_000),    // no PyTorch figure: not judged
		row(w8Replay, 16<<10, 10_000), // no PyTorch figure: not judged
	}
	judgeW8(rows, peers, true)
	meets := func(i int) any {
		if rows[i].Meets == nil {
			return nil
		}
		return *rows[i].Meets
	}
	assert.Equal(t, []any{true, false, true, nil, nil, nil, nil}, []any{meets(0), meets(1), meets(2), meets(3), meets(4), meets(5), meets(6)})
	assert.Equal(t, "<= 1.0x PyTorch pinned, <= 1.3x floor", rows[1].Target)
	assert.Equal(t, "<= 1.0x PyTorch graph", rows[6].Target, "the floor part starts at 128 KiB")
	assert.InDelta(t, 0.8, rows[1].XCalls, 1e-9)
	assert.InDelta(t, 40.0/30, rows[1].XFloor, 1e-9)
	assert.Zero(t, rows[5].XCalls, "no three-call row at 16 KiB")

	judgeW8(rows, peers, false)
	for _, r := range rows {
		assert.Nil(t, r.Meets, "not judged off a GPU")
	}
}

// TestBenchKernelReadFlags: -kernel-reads=false turns copy-kernel reads
// off and -kernel-read-max moves their upper bound, each adding exactly one
// Backend option, and neither adds one by default.
func TestBenchKernelReadFlags(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		max     int
		off     bool
		options int
	}{
		{args: nil},
		{args: []string{"-kernel-read-max", "4MiB"}, max: 4 << 20, options: 1},
		{args: []string{"-kernel-reads=false", "-kernel-read-max", "4MiB"}, max: 4 << 20, off: true, options: 1},
	} {
		cfg := defaultBenchConfig()
		base := len(cfg.options())
		fs, apply := benchFlags(&cfg, io.Discard)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		apply()
		if cfg.KernelReadMax != tc.max || cfg.NoKernelReads != tc.off {
			t.Errorf("%v: max %d off %v, want %d %v", tc.args, cfg.KernelReadMax, cfg.NoKernelReads, tc.max, tc.off)
		}
		if got := len(cfg.options()) - base; got != tc.options {
			t.Errorf("%v: %d options added, want %d", tc.args, got, tc.options)
		}
	}
}
