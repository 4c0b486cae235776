package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/vyre-go/vyrecuda/core"
)

// runMemplot reads a core.MemorySnapshot written as JSON and draws its
// timeline as SVG. Flags may come before or after the file name.
func runMemplot(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("memplot", flag.ContinueOnError)
	out := fs.String("o", "memory.svg", "the SVG file to write")
	top := fs.Int("top", 8, "allocation sites drawn on their own (the rest are drawn together)")
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: vyrecuda memplot snapshot.json [-o memory.svg] [-top N]\n\n"+
			"Draws a memory snapshot (Backend.MemorySnapshot written with encoding/json, or\n"+
			"bench -memory-snapshot) as a timeline of allocated bytes, stacked by allocation\n"+
			"site with the largest sites named, and the reserved bytes.\n\n")
		fs.PrintDefaults()
	}
	fs.SetOutput(stderr)
	var file string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return exitOK
			}
			return exitUsage
		}
		if fs.NArg() == 0 {
			break
		}
		if file != "" {
			fmt.Fprintf(stderr, "vyrecuda memplot: unexpected argument %q\n", fs.Arg(0))
			fs.Usage()
			return exitUsage
		}
		file, args = fs.Arg(0), fs.Args()[1:]
	}
	if file == "" || *top < 1 {
		fmt.Fprintln(stderr, "vyrecuda memplot: want one snapshot file and -top of at least 1")
		fs.Usage()
		return exitUsage
	}
	snap, err := readSnapshot(file)
	if err != nil {
		return fail(stderr, "memplot", err)
	}
	if err := writeFileWith(*out, func(w io.Writer) error { return writeMemorySVG(w, buildTimeline(snap, *top)) }); err != nil {
		return fail(stderr, "memplot", err)
	}
	fmt.Fprintf(stdout, "%s: %d events, %d live blocks -> %s\n", file, len(snap.Events), len(snap.Blocks), *out)
	return exitOK
}

// readSnapshot decodes a snapshot file, refusing unknown fields so a file
// of another kind is not drawn as an empty timeline.
func readSnapshot(path string) (core.MemorySnapshot, error) {
	var s core.MemorySnapshot
	f, err := os.Open(path)
	if err != nil {
		return s, err
	}
	defer f.Close()
	dec := json.NewDecoder(f)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return s, fmt.Errorf("%s is not a memory snapshot: %w", path, err)
	}
	return s, nil
}

// writeFileWith creates path and writes it with write, removing it again
// when writing fails.
func writeFileWith(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	werr := write(f)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		_ = os.Remove(path)
	}
	return werr
}

// site is one allocation site: the first frame of an allocation's stack.
type site struct {
	Func, Where string // the function without its import path; file:line
	Full        string // the whole frame, for the tooltip
	Peak        uint64 // most bytes it held live at once in the window
}

// timeline is a snapshot replayed for drawing: for each event, its time
// and the bytes each layer holds after it. Layers are the top sites in
// order, then every other site together, then what the window cannot place
// (blocks allocated before it began).
type timeline struct {
	Title    string
	T        []float64   // seconds since the first event
	Layers   [][]float64 // [layer][event] bytes
	Names    []string    // one per layer: the site's function, or what the layer is
	Details  []string    // one per layer: where, and the peak
	Tips     []string    // one per layer: the full frame or an explanation
	Reserved []float64
	Marks    []mark // OOMs, retries, trims
	Empty    string // why there is nothing to draw, when there is nothing
}

// mark is an event drawn as a marker.
type mark struct {
	T    float64
	Kind core.MemoryEventKind
	Text string
}

// siteOf names the site of an allocation from its stack.
func siteOf(stack []core.MemoryFrame) (key string, st site) {
	if len(stack) == 0 {
		return "", site{Func: "(no stack)", Full: "allocations recorded without a stack"}
	}
	f := stack[0]
	fn := f.Function
	if i := strings.LastIndex(fn, "/"); i >= 0 {
		fn = fn[i+1:]
	}
	key = fmt.Sprintf("%s %s:%d", f.Function, f.File, f.Line)
	return key, site{Func: fn, Where: fmt.Sprintf("%s:%d", filepath.Base(f.File), f.Line), Full: key}
}

// buildTimeline replays the snapshot's events: a first pass finds each
// site's peak, a second records the layers' bytes after every event.
func buildTimeline(s core.MemorySnapshot, top int) timeline {
	tl := timeline{Title: fmt.Sprintf("device memory of %s: %d events", s.Device, len(s.Events))}
	if s.Dropped > 0 {
		tl.Title += fmt.Sprintf(" (the %d before them dropped)", s.Dropped)
	}
	if len(s.Events) == 0 {
		tl.Empty = "no events: call Backend.RecordMemoryHistory before the allocations to record them"
		return tl
	}
	sites := map[string]*site{}
	replay(s.Events, func(key string, stack []core.MemoryFrame, held uint64) {
		st := sites[key]
		if st == nil {
			_, v := siteOf(stack)
			st = &v
			sites[key] = st
		}
		st.Peak = max(st.Peak, held)
	}, nil)
	ranked := make([]string, 0, len(sites))
	for k := range sites {
		ranked = append(ranked, k)
	}
	slices.SortFunc(ranked, func(a, b string) int {
		if sites[a].Peak != sites[b].Peak {
			return cmpDesc(sites[a].Peak, sites[b].Peak)
		}
		return strings.Compare(a, b)
	})
	ranked = ranked[:min(top, len(ranked))]
	layerOf := map[string]int{}
	for i, k := range ranked {
		layerOf[k] = i
		st := sites[k]
		tl.Names = append(tl.Names, st.Func)
		tl.Details = append(tl.Details, strings.TrimPrefix(st.Where+", peak "+formatBytes(st.Peak), ", "))
		tl.Tips = append(tl.Tips, st.Full)
	}
	fillLayers(&tl, s, layerOf)
	other, earlier := len(ranked), len(ranked)+1
	tl.Names = append(tl.Names, "other sites", "allocated before the window")
	tl.Details = append(tl.Details,
		fmt.Sprintf("%d more %s, together at most %s", len(sites)-len(ranked), plural(len(sites)-len(ranked), "site"), formatBytes(uint64(maxOf(tl.Layers[other])))),
		fmt.Sprintf("at most %s", formatBytes(uint64(maxOf(tl.Layers[earlier])))))
	tl.Tips = append(tl.Tips, "every site not named above", "blocks allocated before recording began, or whose allocation fell out of the history")
	return tl
}

// fillLayers records, after every event, each layer's bytes and the
// reserved bytes, and collects the markers. Layers are the named sites,
// then the other sites, then the bytes no recorded allocation explains.
func fillLayers(tl *timeline, s core.MemorySnapshot, layerOf map[string]int) {
	n, other := len(s.Events), len(layerOf)
	earlier := other + 1
	tl.Layers = make([][]float64, earlier+1)
	for i := range tl.Layers {
		tl.Layers[i] = make([]float64, n)
	}
	tl.T, tl.Reserved = make([]float64, n), make([]float64, n)
	held := make([]uint64, earlier) // named layers, then other
	bySite := map[string]uint64{}
	t0 := s.Events[0].Time
	onSite := func(key string, _ []core.MemoryFrame, now uint64) {
		l, ok := layerOf[key]
		if !ok {
			l = other
		}
		held[l] = held[l] - bySite[key] + now
		bySite[key] = now
	}
	replay(s.Events, onSite, func(i int) {
		var known uint64
		for l, v := range held {
			tl.Layers[l][i] = float64(v)
			known += v
		}
		e := s.Events[i]
		if e.Allocated > known {
			tl.Layers[earlier][i] = float64(e.Allocated - known)
		}
		tl.T[i] = e.Time.Sub(t0).Seconds()
		tl.Reserved[i] = float64(e.Reserved)
		if text := markText(e); text != "" {
			tl.Marks = append(tl.Marks, mark{T: tl.T[i], Kind: e.Kind, Text: text})
		}
	})
}

// markText describes an event drawn as a marker, or is empty for the
// others.
func markText(e core.MemoryEvent) string {
	switch e.Kind {
	case core.MemoryOOM:
		return fmt.Sprintf("OOM in %s: %s requested (%s with rounding)", e.Op, formatBytes(e.Requested), formatBytes(e.Size))
	case core.MemoryRetry:
		return fmt.Sprintf("retry: released %s of cache for a request of %s", formatBytes(e.Size), formatBytes(e.Requested))
	case core.MemoryTrim:
		return fmt.Sprintf("%s: released %s of cache", e.Op, formatBytes(e.Size))
	}
	return ""
}

// replay walks the events, tracking the live blocks by address: after each
// allocation or free of a known block it calls onSite with the block's
// site, the allocation's stack (nil for a free) and the bytes the site
// holds now; after every event it calls after, when set, with its index.
func replay(events []core.MemoryEvent, onSite func(key string, stack []core.MemoryFrame, held uint64), after func(int)) {
	type blk struct {
		key   string
		bytes uint64
	}
	live := map[uint64]blk{}
	bySite := map[string]uint64{}
	for i, e := range events {
		switch e.Kind {
		case core.MemoryAlloc:
			if old, ok := live[e.Addr]; ok { // its free fell outside the window
				bySite[old.key] -= old.bytes
				onSite(old.key, nil, bySite[old.key])
			}
			key, _ := siteOf(e.Stack)
			live[e.Addr] = blk{key, e.Requested}
			bySite[key] += e.Requested
			onSite(key, e.Stack, bySite[key])
		case core.MemoryFree:
			if old, ok := live[e.Addr]; ok {
				delete(live, e.Addr)
				bySite[old.key] -= old.bytes
				onSite(old.key, nil, bySite[old.key])
			}
		}
		if after != nil {
			after(i)
		}
	}
}

// plural returns word for n == 1, else word with an s.
func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

func cmpDesc(a, b uint64) int {
	if a > b {
		return -1
	}
	return 1
}

// timeUnit picks the unit the x axis is labelled in for a span of seconds.
func timeUnit(span float64) (name string, scale float64) {
	switch d := time.Duration(span * float64(time.Second)); {
	case d < 2*time.Millisecond:
		return "us", 1e6
	case d < 2*time.Second:
		return "ms", 1e3
	}
	return "s", 1
}

// startMemoryHistory turns memory history on for bench -memory-snapshot.
func startMemoryHistory(s *session, cfg benchConfig) error {
	if cfg.MemoryEvents <= 0 {
		return nil
	}
	return s.Backend.RecordMemoryHistory(cfg.MemoryEvents)
}

// writeMemorySnapshot writes the Backend's memory snapshot as JSON for
// bench -memory-snapshot.
func writeMemorySnapshot(s *session, cfg benchConfig) error {
	if cfg.MemorySnapshot == "" {
		return nil
	}
	return writeFileWith(cfg.MemorySnapshot, func(w io.Writer) error {
		return json.NewEncoder(w).Encode(s.Backend.MemorySnapshot())
	})
}
