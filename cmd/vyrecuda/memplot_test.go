package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vyre-go/vyrecuda/core"
	"github.com/vyre-go/vyrecuda/core/sim"
)

// testSnapshot has three sites (A 600 bytes, B 300, C 50), 100 bytes
// allocated before the window and freed in it, a retry, an OOM and a trim,
// one event a millisecond.
func testSnapshot() core.MemorySnapshot {
	frame := func(fn, file string, line int) []core.MemoryFrame {
		return []core.MemoryFrame{{Function: "example.com/app." + fn, File: "/src/app/" + file, Line: line}, {Function: "main.main", File: "/src/app/main.go", Line: 3}}
	}
	a, b, c := frame("loadWeights", "model.go", 10), frame("activations", "model.go", 20), frame("scratch", "run.go", 5)
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	evs := []core.MemoryEvent{
		{Kind: core.MemoryAlloc, Op: "Alloc", Addr: 0x1000, Requested: 600, Size: 640, Allocated: 700, Reserved: 1000, Stack: a},
		{Kind: core.MemoryAlloc, Op: "Alloc", Addr: 0x2000, Requested: 300, Size: 320, Allocated: 1000, Reserved: 1400, Stack: b},
		{Kind: core.MemoryAlloc, Op: "Upload", Addr: 0x3000, Requested: 50, Size: 56, Allocated: 1050, Reserved: 1500, Stack: c},
		{Kind: core.MemoryFree, Op: "Upload", Addr: 0x3000, Requested: 50, Size: 56, Allocated: 1000, Reserved: 1500, Stack: c},
		{Kind: core.MemoryFree, Op: "Free", Addr: 0x9000, Requested: 100, Size: 104, Allocated: 900, Reserved: 1500},
		{Kind: core.MemoryRetry, Requested: 2000, Size: 400, Allocated: 900, Reserved: 1100},
		{Kind: core.MemoryOOM, Op: "Alloc", Requested: 2000, Size: 2048, Allocated: 900, Reserved: 1100},
		{Kind: core.MemoryTrim, Op: "Trim", Size: 100, Allocated: 900, Reserved: 1000},
		{Kind: core.MemoryFree, Op: "Free", Addr: 0x2000, Requested: 300, Size: 320, Allocated: 600, Reserved: 1000},
	}
	for i := range evs {
		evs[i].Time = t0.Add(time.Duration(i) * time.Millisecond)
	}
	return core.MemorySnapshot{Device: "testdev", Recording: true, MaxEvents: 100, Dropped: 3, Events: evs,
		Blocks: []core.MemoryBlock{{Addr: 0x1000, Requested: 600, Size: 640}}}
}

func TestTimelineReplaysTheEvents(t *testing.T) {
	tl := buildTimeline(testSnapshot(), 2)
	assert.Equal(t, "device memory of testdev: 9 events (the 3 before them dropped)", tl.Title)
	assert.Equal(t, []string{"app.loadWeights", "app.activations", "other sites", "allocated before the window"}, tl.Names)
	assert.Equal(t, []string{"model.go:10, peak 600 B", "model.go:20, peak 300 B", "1 more site, together at most 50 B", "at most 100 B"}, tl.Details)
	assert.Equal(t, "example.com/app.loadWeights /src/app/model.go:10", tl.Tips[0])
	assert.Equal(t, [][]float64{
		{600, 600, 600, 600, 600, 600, 600, 600, 600},
		{0, 300, 300, 300, 300, 300, 300, 300, 0},
		{0, 0, 50, 0, 0, 0, 0, 0, 0},
		{100, 100, 100, 100, 0, 0, 0, 0, 0},
	}, tl.Layers)
	assert.Equal(t, []float64{1000, 1400, 1500, 1500, 1500, 1100, 1100, 1000, 1000}, tl.Reserved)
	assert.InDeltaSlice(t, []float64{0, .001, .002, .003, .004, .005, .006, .007, .008}, tl.T, 1e-12)
	require.Len(t, tl.Marks, 3)
	assert.Equal(t, mark{T: tl.T[5], Kind: core.MemoryRetry, Text: "retry: released 400 B of cache for a request of 2.0 KiB"}, tl.Marks[0])
	assert.Equal(t, mark{T: tl.T[6], Kind: core.MemoryOOM, Text: "OOM in Alloc: 2.0 KiB requested (2 KiB with rounding)"}, tl.Marks[1])
	assert.Equal(t, mark{T: tl.T[7], Kind: core.MemoryTrim, Text: "Trim: released 100 B of cache"}, tl.Marks[2])
	assert.Equal(t, []core.MemoryEventKind{core.MemoryRetry, core.MemoryOOM, core.MemoryTrim}, []core.MemoryEventKind{tl.Marks[0].Kind, tl.Marks[1].Kind, tl.Marks[2].Kind})

	all := buildTimeline(testSnapshot(), 8)
	assert.Equal(t, []string{"app.loadWeights", "app.activations", "app.scratch", "other sites", "allocated before the window"}, all.Names)
	assert.Equal(t, []float64{0, 0, 0, 0, 0, 0, 0, 0, 0}, all.Layers[3], "no other sites")
}

// svgNode is an SVG element with its attributes, text and children.
type svgNode struct {
	XMLName  xml.Name
	Attrs    []xml.Attr `xml:",any,attr"`
	Text     string     `xml:",chardata"`
	Children []svgNode  `xml:",any"`
}

func (n svgNode) attr(name string) string {
	for _, a := range n.Attrs {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

// find returns every element under n (n included) that keep accepts.
func (n svgNode) find(keep func(svgNode) bool) []svgNode {
	var out []svgNode
	if keep(n) {
		out = append(out, n)
	}
	for _, c := range n.Children {
		out = append(out, c.find(keep)...)
	}
	return out
}

func (n svgNode) texts(class string) []string {
	var out []string
	for _, e := range n.find(func(e svgNode) bool { return e.XMLName.Local == "text" && e.attr("class") == class }) {
		out = append(out, e.Text)
	}
	return out
}

func byID(root svgNode, id string) svgNode {
	got := root.find(func(e svgNode) bool { return e.attr("id") == id })
	if len(got) != 1 {
		return svgNode{}
	}
	return got[0]
}

func hasClass(e svgNode, class string) bool {
	return strings.Contains(" "+e.attr("class")+" ", " "+class+" ")
}

func parseSVG(t *testing.T, data []byte) svgNode {
	t.Helper()
	var root svgNode
	require.NoError(t, xml.Unmarshal(data, &root))
	require.Equal(t, "svg", root.XMLName.Local)
	return root
}

func TestMemorySVGDrawsAxesSeriesAndLabels(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, writeMemorySVG(&buf, buildTimeline(testSnapshot(), 2)))
	root := parseSVG(t, buf.Bytes())
	assert.Equal(t, "1040", root.attr("width"))
	assert.Equal(t, "device memory of testdev: 9 events (the 3 before them dropped)", byID(root, "title").Text)

	// Axes: bytes up to 1.5 KiB in steps of 0.5 KiB, milliseconds 0 to 8.
	assert.Equal(t, "time since the first event (ms)", byID(root, "xlabel").Text)
	assert.Equal(t, "device memory", byID(root, "ylabel").Text)
	assert.Equal(t, "M90.0 60.0 V490.0 H640.0", byID(root, "axes").attr("d"))
	assert.Equal(t, []string{"0 KiB", "0.5 KiB", "1 KiB", "1.5 KiB"}, root.texts("ytick"))
	assert.Equal(t, []string{"0", "1", "2", "3", "4", "5", "6", "7", "8"}, root.texts("xtick"))

	// Series: one area per layer that holds bytes, and the reserved line,
	// which starts at 1000 bytes (y = 490 - 1000/1536*430) and ends there.
	areas := root.find(func(e svgNode) bool { return e.XMLName.Local == "path" && hasClass(e, "area") })
	require.Len(t, areas, 4)
	var titles []string
	for _, a := range areas {
		titles = append(titles, a.Children[0].Text)
		assert.True(t, strings.HasPrefix(a.attr("d"), "M90.0 ") && strings.HasSuffix(a.attr("d"), "H90.0Z"), "an area spans the events: %s", a.attr("d"))
	}
	assert.Contains(t, titles[0], "app.loadWeights, model.go:10, peak 600 B: example.com/app.loadWeights /src/app/model.go:10")
	assert.Contains(t, titles[3], "allocated before the window")
	reserved := root.find(func(e svgNode) bool { return hasClass(e, "reserved") })
	require.Len(t, reserved, 1)
	d := reserved[0].attr("d")
	assert.True(t, strings.HasPrefix(d, "M90.0 210.1H"), d)
	assert.True(t, strings.HasSuffix(d, "V210.1H640.0"), d)
	assert.Contains(t, d, "H227.5V70.1H", "1500 bytes from the third event, at 2 ms")

	// Labels: the legend names the sites, the markers the OOM, the retry and the trim.
	var legend []string
	for _, g := range root.find(func(e svgNode) bool { return hasClass(e, "legend") }) {
		for _, c := range g.Children {
			if c.XMLName.Local == "text" {
				legend = append(legend, c.Text)
			}
		}
	}
	assert.Equal(t, []string{"reserved (held from the driver)", "allocated before the window", "at most 100 B", "other sites", "1 more site, together at most 50 B",
		"app.activations", "model.go:20, peak 300 B", "app.loadWeights", "model.go:10, peak 600 B"}, legend)
	oom := root.find(func(e svgNode) bool { return hasClass(e, "oom") })
	require.Len(t, oom, 1)
	assert.Equal(t, "OOM in Alloc: 2.0 KiB requested (2 KiB with rounding)", oom[0].Children[2].Text)
	assert.Equal(t, "502.5", oom[0].Children[0].attr("x1"), "at 6 ms")
	assert.Len(t, root.find(func(e svgNode) bool { return hasClass(e, "retry") }), 1)
	assert.Len(t, root.find(func(e svgNode) bool { return hasClass(e, "trim") }), 1)
}

func TestMemorySVGWithoutEventsSaysWhy(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, writeMemorySVG(&buf, buildTimeline(core.MemorySnapshot{Device: `a <b> & "c"`}, 8)))
	root := parseSVG(t, buf.Bytes())
	assert.Contains(t, byID(root, "empty").Text, "RecordMemoryHistory")
	assert.Empty(t, root.find(func(e svgNode) bool { return hasClass(e, "area") }))
	assert.Equal(t, `device memory of a <b> & "c": 0 events`, byID(root, "title").Text)
}

func TestKeepPointsKeepsPeaksAndLevels(t *testing.T) {
	xs := []float64{10, 10.1, 10.2, 10.3, 20, 20.1, 30}
	totals := []float64{1, 9, 2, 3, 5, 4, 7}
	assert.Equal(t, []int{1, 3, 4, 5, 6}, keepPoints(xs, totals), "per half pixel the highest and the last point")
}

// writeSnapshotFile records a short history on the simulated device and
// writes its snapshot where memplot can read it.
func writeSnapshotFile(t *testing.T) string {
	t.Helper()
	b, err := core.Open(sim.New(sim.Config{}), core.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	defer b.Close()
	require.NoError(t, b.RecordMemoryHistory(100))
	h, err := b.Alloc(4096)
	require.NoError(t, err)
	g, err := b.Alloc(1000)
	require.NoError(t, err)
	require.NoError(t, b.Free(g))
	_ = h
	raw, err := json.Marshal(b.MemorySnapshot())
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "snapshot.json")
	require.NoError(t, os.WriteFile(path, raw, 0o644))
	return path
}

func TestMemplotCommand(t *testing.T) {
	snap := writeSnapshotFile(t)
	for _, args := range [][]string{
		{"memplot", snap, "-o", "OUT"},              // the file first, as the usage shows
		{"memplot", "-o", "OUT", "-top", "1", snap}, // flags first
	} {
		out := filepath.Join(t.TempDir(), "memory.svg")
		for i := range args {
			if args[i] == "OUT" {
				args[i] = out
			}
		}
		code, stdout, stderr := runCmd(args...)
		require.Equal(t, exitOK, code, stderr)
		assert.Contains(t, stdout, "3 events, 1 live blocks -> "+out)
		svg, err := os.ReadFile(out)
		require.NoError(t, err)
		root := parseSVG(t, svg)
		assert.Contains(t, byID(root, "title").Text, "3 events")
		assert.Contains(t, root.texts("")[len(root.texts(""))-1], "writeSnapshotFile", "the largest site is the test's own function")
	}
}

func TestMemplotRefusals(t *testing.T) {
	snap := writeSnapshotFile(t)
	results := filepath.Join(t.TempDir(), "results.json")
	require.NoError(t, os.WriteFile(results, []byte(`{"device":{"name":"x"},"sweep":[]}`), 0o644))
	out := filepath.Join(t.TempDir(), "memory.svg")
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"memplot"}, exitUsage, "want one snapshot file"},
		{[]string{"memplot", snap, snap}, exitUsage, "unexpected argument"},
		{[]string{"memplot", "-top", "0", snap}, exitUsage, "-top of at least 1"},
		{[]string{"memplot", "-bogus", snap}, exitUsage, "flag provided but not defined"},
		{[]string{"memplot", filepath.Join(t.TempDir(), "missing.json"), "-o", out}, exitFail, "no such file"},
		{[]string{"memplot", results, "-o", out}, exitFail, "is not a memory snapshot"},
		{[]string{"memplot", snap, "-o", filepath.Join(t.TempDir(), "no", "such", "dir.svg")}, exitFail, "no such file"},
	}
	for _, tt := range tests {
		code, _, stderr := runCmd(tt.args...)
		assert.Equal(t, tt.code, code, "%v", tt.args)
		assert.Contains(t, stderr, tt.want, "%v", tt.args)
	}
	_, err := os.Stat(out)
	assert.True(t, os.IsNotExist(err), "a refusal writes no SVG")
	code, stdout, _ := runCmd("memplot", "-h")
	assert.Equal(t, exitOK, code)
	assert.Empty(t, stdout)
}

// bench -memory-snapshot writes a snapshot memplot draws, and says in
// results.json that the timings include the recording.
func TestBenchWritesAMemorySnapshot(t *testing.T) {
	dir := t.TempDir()
	snap := filepath.Join(dir, "memory.json")
	code, _, stderr := runCmd(append(smallBench, "-workloads", "W4B", "-sweep-max", "4KiB", "-out", dir,
		"-memory-snapshot", snap, "-memory-events", "50")...)
	require.Equal(t, exitOK, code, stderr)
	s, err := readSnapshot(snap)
	require.NoError(t, err)
	assert.True(t, s.Recording)
	assert.Len(t, s.Events, 50, "the bound holds")
	assert.Positive(t, s.Dropped)
	results, err := os.ReadFile(filepath.Join(dir, resultsFile))
	require.NoError(t, err)
	assert.Contains(t, string(results), `"memory_events": 50`)
	code, _, stderr = runCmd("memplot", snap, "-o", filepath.Join(dir, "memory.svg"))
	require.Equal(t, exitOK, code, stderr)

	code, _, stderr = runCmd(append(smallBench, "-workloads", "W4B", "-memory-snapshot", snap, "-memory-events", "0")...)
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, stderr, "-memory-events 0")
}
