package main

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strings"
)

// Plot geometry in SVG user units; the legend sits in the right margin,
// beside the lines rather than over them.
const (
	plotW, plotH                              = 960, 470
	marginL, marginR, marginTop, marginBottom = 80, 240, 60, 70
)

// series is one line of the plot.
type series struct {
	Name, Color string
	Dash        string    // SVG stroke-dasharray; empty: solid
	X, Y        []float64 // X in bytes, Y in GB/s
}

// writeBandwidthSVG draws the sweep: bandwidth (GB/s) against transfer size
// on a log2 x axis, for uploads and readbacks: the library (solid), the
// driver's own pageable copy of the same slice (dashed) and the pinned DMA
// alone (dotted), each where measured. It is plain SVG written by hand, so
// the command needs no plotting dependency.
func writeBandwidthSVG(w io.Writer, r *benchReport) error {
	ss := []series{
		{Name: "upload (host to device)", Color: "#1f77b4"},
		{Name: "readback (device to host)", Color: "#d62728"},
		{Name: "upload, driver pageable", Color: "#1f77b4", Dash: "6 4"},
		{Name: "readback, driver pageable", Color: "#d62728", Dash: "6 4"},
		{Name: "upload, pinned DMA", Color: "#1f77b4", Dash: "2 3"},
		{Name: "readback, pinned DMA", Color: "#d62728", Dash: "2 3"},
	}
	add := func(s *series, x, y float64) {
		if y > 0 {
			s.X, s.Y = append(s.X, x), append(s.Y, y)
		}
	}
	for _, p := range r.Sweep {
		k := 0
		if p.Direction == dirReadback {
			k = 1
		}
		add(&ss[k], float64(p.Bytes), p.GBps)
		add(&ss[k+2], float64(p.Bytes), p.DriverPageableGBps)
		add(&ss[k+4], float64(p.Bytes), p.PinnedDMAGBps)
	}
	var drawn []series
	for _, s := range ss {
		if len(s.X) > 0 || s.Dash == "" {
			drawn = append(drawn, s)
		}
	}
	title := fmt.Sprintf("vyrecuda bandwidth on %s (%s), median of %d runs", r.Device.Name, r.Device.Kind, r.Config.Repeats)
	return drawPlot(w, plotAxes{Title: title, X: "transfer size (bytes, log scale)", Y: "bandwidth (GB/s)", Unit: "GB/s"}, drawn)
}

// writeW8SVG draws W8: the median time of a step against the bytes moved
// each way, one solid line per form and, where -peers gave them, PyTorch's
// three forms dashed in the colour of the form they are compared with.
func writeW8SVG(w io.Writer, r *benchReport) error {
	colors := map[string]string{w8Run: "#1f77b4", w8RunPinned: "#2ca02c", w8Replay: "#ff7f0e", w8Calls: "#9467bd", w8Floor: "#333333"}
	short := map[string]string{w8Run: "Run, Go slices", w8RunPinned: "Run, pinned", w8Replay: "Graph.Replay, pinned",
		w8Calls: "three calls", w8Floor: "floor (raw driver)"}
	var ss []series
	for _, f := range w8Forms {
		s := series{Name: short[f.ID], Color: colors[f.ID]}
		for _, row := range r.W8 {
			if row.Form == f.ID {
				s.X, s.Y = append(s.X, float64(row.Bytes)), append(s.Y, float64(row.MedianNs)/1e3)
			}
		}
		if len(s.X) > 0 {
			ss = append(ss, s)
		}
	}
	if p := r.PeersW8; p != nil {
		for _, pf := range []struct{ form, peer string }{{w8Run, peerPageable}, {w8RunPinned, peerPinned}, {w8Replay, peerGraph}} {
			s := series{Name: "PyTorch " + pf.peer, Color: colors[pf.form], Dash: "6 4"}
			for _, row := range p.Rows {
				if ns := p.median(row.Bytes, pf.peer); ns > 0 {
					s.X, s.Y = append(s.X, float64(row.Bytes)), append(s.Y, float64(ns)/1e3)
				}
			}
			ss = append(ss, s)
		}
	}
	title := fmt.Sprintf("W8 inference step on %s (%s), median of %d steps", r.Device.Name, r.Device.Kind, r.Config.W8Steps)
	return drawPlot(w, plotAxes{Title: title, X: "bytes each way (log scale)", Y: "time per step (us)", Unit: "us"}, ss)
}

// plotAxes names a plot, its axes and the unit of its y values.
type plotAxes struct{ Title, X, Y, Unit string }

// drawPlot writes a line chart with a log2 x axis of byte sizes and a linear
// y axis starting at zero.
func drawPlot(w io.Writer, ax plotAxes, ss []series) error {
	bw := bufio.NewWriter(w)
	xmin, xmax, ymax := math.Inf(1), math.Inf(-1), 0.0
	for _, s := range ss {
		for i := range s.X {
			xmin, xmax = math.Min(xmin, s.X[i]), math.Max(xmax, s.X[i])
			ymax = math.Max(ymax, s.Y[i])
		}
	}
	if math.IsInf(xmin, 1) { // no points: draw empty axes over 4 KiB..1 MiB
		xmin, xmax = 4<<10, 1<<20
	}
	lx0, lx1 := math.Floor(math.Log2(xmin)), math.Ceil(math.Log2(xmax))
	if lx1 <= lx0 {
		lx0, lx1 = lx0-1, lx1+1
	}
	ytop, ystep := niceAxis(ymax)
	x0, x1 := float64(marginL), float64(plotW-marginR)
	y0, y1 := float64(plotH-marginBottom), float64(marginTop)
	px := func(b float64) float64 { return x0 + (math.Log2(b)-lx0)/(lx1-lx0)*(x1-x0) }
	py := func(v float64) float64 { return y0 - v/ytop*(y0-y1) }

	fmt.Fprintf(bw, `<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">
<rect width="100%%" height="100%%" fill="white"/>
<text x="%d" y="28" text-anchor="middle" font-size="15">%s</text>
`, plotW, plotH, plotW, plotH, (marginL+plotW-marginR)/2, esc(ax.Title))

	// Horizontal grid and y labels.
	for v := 0.0; v <= ytop*(1+1e-9); v += ystep {
		y := py(v)
		fmt.Fprintf(bw, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", x0, y, x1, y)
		fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", x0-6, y+4, trimFloat(v))
	}
	// Vertical grid and x labels: every power of two, labelled every other
	// one when there are many.
	every := 1
	if lx1-lx0 > 12 {
		every = 2
	}
	for e := lx0; e <= lx1; e++ {
		x := px(math.Exp2(e))
		fmt.Fprintf(bw, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", x, y0, x, y1)
		if int(e-lx0)%every == 0 {
			fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, y0+18, esc(formatBytes(uint64(math.Exp2(e)))))
		}
	}
	// Axes and their labels.
	fmt.Fprintf(bw, `<path d="M%.1f %.1f V%.1f H%.1f" fill="none" stroke="black"/>`+"\n", x0, y1, y0, x1)
	fmt.Fprintf(bw, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", (x0+x1)/2, plotH-22, esc(ax.X))
	fmt.Fprintf(bw, `<text transform="translate(22 %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", (y0+y1)/2, esc(ax.Y))

	// Lines and points with tooltips.
	for _, s := range ss {
		if len(s.X) == 0 {
			continue
		}
		pts := make([]string, len(s.X))
		for j := range s.X {
			pts[j] = fmt.Sprintf("%.1f,%.1f", px(s.X[j]), py(s.Y[j]))
		}
		fmt.Fprintf(bw, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", strings.Join(pts, " "), s.Color, dashAttr(s.Dash))
		for j := range s.X {
			fmt.Fprintf(bw, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"><title>%s: %s at %.2f %s</title></circle>`+"\n",
				px(s.X[j]), py(s.Y[j]), s.Color, esc(s.Name), esc(formatBytes(uint64(s.X[j]))), s.Y[j], esc(ax.Unit))
		}
	}
	// The legend, in the right margin.
	lx := x1 + 16
	for i, s := range ss {
		ly := y1 + 16 + float64(i)*18
		fmt.Fprintf(bw, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"%s/>`+"\n", lx, ly-4, lx+24, ly-4, s.Color, dashAttr(s.Dash))
		fmt.Fprintf(bw, `<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+30, ly, esc(s.Name))
	}
	fmt.Fprintln(bw, "</svg>")
	return bw.Flush()
}

// niceAxis returns a y-axis top at or above v and a tick step from the 1, 2,
// 5 series, giving four to ten ticks.
func niceAxis(v float64) (top, step float64) {
	if !(v > 0) || math.IsInf(v, 1) {
		return 1, 0.25
	}
	raw := v / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		step = m * mag
		if step >= raw {
			break
		}
	}
	return math.Ceil(v/step) * step, step
}

// trimFloat prints a tick value without trailing zeros.
func trimFloat(v float64) string {
	s := fmt.Sprintf("%.3f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

// esc escapes text for SVG character data and attributes.
func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s)) // writes to a strings.Builder never fail
	return b.String()
}

// dashAttr is the stroke-dasharray attribute for dash, or nothing.
func dashAttr(dash string) string {
	if dash == "" {
		return ""
	}
	return fmt.Sprintf(` stroke-dasharray="%s"`, dash)
}
