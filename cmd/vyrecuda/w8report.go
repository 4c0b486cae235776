package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// PyTorch's three forms of the step, as the peer script names them.
const (
	peerPageable = "pageable"
	peerPinned   = "pinned"
	peerGraph    = "graph"
)

// w8Row is one form of W8 at one size. Times are wall-clock nanoseconds per
// step.
type w8Row struct {
	Form         string  `json:"form"`
	Title        string  `json:"title"`
	Bytes        int64   `json:"bytes"` // each way
	Steps        int     `json:"steps"`
	MedianNs     int64   `json:"median_ns"`
	MinNs        int64   `json:"min_ns"`
	MaxNs        int64   `json:"max_ns"`
	SyncsPerStep float64 `json:"syncs_per_step"` // the Backend's sync points; 0 for the floor, which bypasses it
	// Verified says the last step's output matched the CPU's bit for bit
	// (a mismatch fails the bench, so a written row always has it).
	Verified bool `json:"verified"`
	// XCalls and XFloor are the median over the three-call path's and the
	// floor's medians at the same size; 0 where that form did not run.
	XCalls float64 `json:"x_three_calls,omitempty"`
	XFloor float64 `json:"x_floor,omitempty"`
	// Peer names PyTorch's form compared with; PeerNs is its median from
	// -peers and XPeer the ratio, when given.
	Peer   string  `json:"peer_form,omitempty"`
	PeerNs int64   `json:"peer_ns,omitempty"`
	XPeer  float64 `json:"x_peer,omitempty"`
	Target string  `json:"target,omitempty"`
	Meets  *bool   `json:"meets,omitempty"` // only on a GPU, and only when every part of the target was measured
}

// w8Target is a form's goal on the H100 (docs/BENCHMARKS.md lists them).
type w8Target struct {
	MaxXPeer  float64 // median at most this many times PyTorch's form, when set
	MaxXFloor float64 // median at most this many times the floor, when set ...
	FloorFrom int64   // ... for sizes from this many bytes
}

// text describes the target for a row of n bytes; empty for none.
func (t w8Target) text(peer string, n int64) string {
	var parts []string
	if t.MaxXPeer > 0 {
		parts = append(parts, fmt.Sprintf("<= %.1fx PyTorch %s", t.MaxXPeer, peer))
	}
	if t.MaxXFloor > 0 && n >= t.FloorFrom {
		parts = append(parts, fmt.Sprintf("<= %.1fx floor", t.MaxXFloor))
	}
	return strings.Join(parts, ", ")
}

// met reports whether r reaches the target, and whether every part of the
// target could be judged (the peer's figure and the floor were measured).
func (t w8Target) met(r w8Row) (meets, judged bool) {
	meets, judged = true, true
	if t.MaxXPeer > 0 {
		judged = judged && r.XPeer > 0
		meets = meets && r.XPeer <= t.MaxXPeer
	}
	if t.MaxXFloor > 0 && r.Bytes >= t.FloorFrom {
		judged = judged && r.XFloor > 0
		meets = meets && r.XFloor <= t.MaxXFloor
	}
	return meets, judged
}

// judgeW8 fills each row's ratios, PyTorch figure and target; gpu says
// whether the targets are judged.
func judgeW8(rows []w8Row, peers *w8Peers, gpu bool) {
	median := map[string]int64{}
	for _, r := range rows {
		median[fmt.Sprint(r.Form, r.Bytes)] = r.MedianNs
	}
	for i := range rows {
		r := &rows[i]
		r.XCalls = fraction(r.MedianNs, median[fmt.Sprint(w8Calls, r.Bytes)])
		r.XFloor = fraction(r.MedianNs, median[fmt.Sprint(w8Floor, r.Bytes)])
		form := w8FormByID(r.Form)
		r.Peer = form.Peer
		if peers != nil && form.Peer != "" {
			r.PeerNs = peers.median(r.Bytes, form.Peer)
			r.XPeer = fraction(r.MedianNs, r.PeerNs)
		}
		r.Target, r.Meets = form.Target.text(form.Peer, r.Bytes), nil
		if meets, judged := form.Target.met(*r); gpu && r.Target != "" && judged {
			r.Meets = &meets
		}
	}
}

// fraction is a/b, or 0 when b was not measured.
func fraction(a, b int64) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// w8FormByID returns the form with id, or the zero form.
func w8FormByID(id string) w8Form {
	for _, f := range w8Forms {
		if f.ID == id {
			return f
		}
	}
	return w8Form{}
}

// w8Peers is PyTorch's W8 figures, read from the peer script's output.
type w8Peers struct {
	Source string   `json:"source"` // the script's first line: torch version and device
	Rows   []w8Peer `json:"rows"`
}

// w8Peer is PyTorch's median step, in nanoseconds, per form at one size.
type w8Peer struct {
	Bytes      int64 `json:"bytes"`
	PageableNs int64 `json:"pageable_ns"`
	PinnedNs   int64 `json:"pinned_ns"`
	GraphNs    int64 `json:"graph_ns"`
}

// median returns PyTorch's median for form at n bytes, or 0 when not given.
func (p *w8Peers) median(n int64, form string) int64 {
	for _, r := range p.Rows {
		if r.Bytes != n {
			continue
		}
		switch form {
		case peerPageable:
			return r.PageableNs
		case peerPinned:
			return r.PinnedNs
		case peerGraph:
			return r.GraphNs
		}
	}
	return 0
}

var (
	peerHeader = regexp.MustCompile(`^torch \S+ on .+$`)
	peerLine   = regexp.MustCompile(`^torch W8\s+(\d+) B each way:\s+pageable\s+([0-9.]+) us\s+pinned\s+([0-9.]+) us\s+graph\s+([0-9.]+) us\s*$`)
)

// readW8Peers reads the peer script's output from the file at path.
func readW8Peers(path string) (*w8Peers, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("-peers: %w", err)
	}
	defer f.Close()
	p, err := parseW8Peers(f)
	if err != nil {
		return nil, fmt.Errorf("-peers %s: %w", path, err)
	}
	return p, nil
}

// parseW8Peers parses the peer script's lines ("torch W8 16384 B each way:
// pageable 36.0 us  pinned 25.0 us  graph 23.0 us"); other lines are
// skipped, and at least one such line is required.
func parseW8Peers(r io.Reader) (*w8Peers, error) {
	p := &w8Peers{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if m := peerLine.FindStringSubmatch(line); m != nil {
			row, err := peerRow(m[1:])
			if err != nil {
				return nil, fmt.Errorf("%q: %w", line, err)
			}
			p.Rows = append(p.Rows, row)
		} else if p.Source == "" && peerHeader.MatchString(line) {
			p.Source = line
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(p.Rows) == 0 {
		return nil, fmt.Errorf(`no "torch W8 N B each way: pageable ... us  pinned ... us  graph ... us" line`)
	}
	return p, nil
}

// peerRow converts the byte count and three microsecond figures.
func peerRow(f []string) (w8Peer, error) {
	n, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return w8Peer{}, err
	}
	var ns [3]int64
	for i, s := range f[1:] {
		us, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return w8Peer{}, err
		}
		ns[i] = int64(us * 1e3)
	}
	return w8Peer{Bytes: n, PageableNs: ns[0], PinnedNs: ns[1], GraphNs: ns[2]}, nil
}

// printW8 prints W8's rows as a table.
func printW8(w io.Writer, r *benchReport) {
	if len(r.W8) == 0 {
		return
	}
	fmt.Fprintf(w, "\nW8 inference step: upload float32, y = x*%g+%g (Backend.Compile), read back; median of %d steps after %d warm-up, every form's output checked\n",
		w8Scale, w8Shift, r.Config.W8Steps, r.Config.W8Warmup)
	if p := r.PeersW8; p != nil {
		src := p.Source
		if src == "" {
			src = "version and device not given"
		}
		fmt.Fprintf(w, "PyTorch beside it (-peers %s): %s\n", r.Config.Peers, src)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "each way\tform\tmedian\tmin\tmax\tsyncs/step\tx three calls\tx floor\tPyTorch\tx PyTorch\ttarget (H100)\tstatus")
	for _, x := range r.W8 {
		peer := "-"
		if x.PeerNs > 0 {
			peer = x.Peer + " " + formatDuration(time.Duration(x.PeerNs))
		}
		target := x.Target
		if target == "" {
			target = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.3g\t%s\t%s\t%s\t%s\t%s\t%s\n", formatBytes(uint64(x.Bytes)), x.Title,
			formatDuration(time.Duration(x.MedianNs)), formatDuration(time.Duration(x.MinNs)), formatDuration(time.Duration(x.MaxNs)),
			x.SyncsPerStep, times(x.XCalls), times(x.XFloor), peer, times(x.XPeer), target, meetsText(x.Meets))
	}
	tw.Flush()
}

// times prints a ratio as "1.23x", or "-" when not measured.
func times(v float64) string {
	if v <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", v)
}

// meetsText prints a judged target's outcome, or "-".
func meetsText(m *bool) string {
	switch {
	case m == nil:
		return "-"
	case *m:
		return "meets"
	}
	return "misses"
}
