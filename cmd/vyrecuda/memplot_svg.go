package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/vyre-go/vyrecuda/core"
)

// Memory plot geometry in SVG user units: the plot on the left, the legend
// on the right.
const (
	memW, memH               = 1040, 560
	memLeft, memRight        = 90, 640
	memTop, memBottom        = 60, 490
	memLegendX, memLegendMax = 660, 56 // legend column, and the most characters of a label
)

// siteColors colour the named sites in rank order; other sites and the
// unexplained bytes are greys.
var siteColors = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf", "#7f7f7f"}

const (
	otherColor   = "#b0b0b0"
	earlierColor = "#dedede"
)

// memPlot maps a timeline onto the plot's pixels.
type memPlot struct {
	tl           timeline
	xs           []float64 // pixel x of each point
	xEnd         float64
	ytop, ystep  float64 // in bytes
	unit         uint64
	unitName     string
	tname        string
	tscale, tmax float64
	tstep        float64
	keep         []int // the points drawn
}

// writeMemorySVG draws the timeline: the allocated bytes as areas stacked
// by allocation site (the largest sites named in the legend), the reserved
// bytes as a line over them, and OOMs, retries and trims as markers.
func writeMemorySVG(w io.Writer, tl timeline) error {
	bw := bufio.NewWriter(w)
	p := newMemPlot(tl)
	fmt.Fprintf(bw, `<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">
<rect width="100%%" height="100%%" fill="white"/>
<text id="title" x="%d" y="28" text-anchor="middle" font-size="15">%s</text>
`, memW, memH, memW, memH, (memLeft+memRight)/2, esc(tl.Title))
	p.axes(bw)
	if tl.Empty != "" {
		fmt.Fprintf(bw, `<text id="empty" x="%d" y="%d" text-anchor="middle" fill="#555">%s</text>`+"\n", (memLeft+memRight)/2, (memTop+memBottom)/2, esc(tl.Empty))
	} else {
		p.areas(bw)
		p.reserved(bw)
		p.marks(bw)
		p.legend(bw)
	}
	fmt.Fprintln(bw, "</svg>")
	return bw.Flush()
}

func newMemPlot(tl timeline) *memPlot {
	p := &memPlot{tl: tl}
	var ymax float64
	totals := make([]float64, len(tl.T))
	for i := range tl.T {
		for _, l := range tl.Layers {
			totals[i] += l[i]
		}
		ymax = math.Max(ymax, math.Max(totals[i], tl.Reserved[i]))
	}
	p.unit, p.unitName = 1, "B"
	for _, u := range []struct {
		n    uint64
		name string
	}{{1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if ymax >= float64(u.n) {
			p.unit, p.unitName = u.n, u.name
			break
		}
	}
	top, step := niceAxis(ymax / float64(p.unit))
	p.ytop, p.ystep = top*float64(p.unit), step*float64(p.unit)
	span := 0.0
	if n := len(tl.T); n > 0 {
		span = tl.T[n-1]
	}
	if span <= 0 { // every event at one instant: space them evenly
		span = 1
	}
	p.tname, p.tscale = timeUnit(span)
	p.tmax, p.tstep = timeAxis(span * p.tscale)
	p.xs = make([]float64, len(tl.T))
	for i, t := range tl.T {
		if tl.T[len(tl.T)-1] <= 0 {
			t = float64(i) / math.Max(1, float64(len(tl.T)-1))
		}
		p.xs[i] = p.px(t)
	}
	p.xEnd = float64(memRight)
	if len(p.xs) > 0 {
		p.xEnd = math.Min(float64(memRight), p.xs[len(p.xs)-1]+4)
	}
	p.keep = keepPoints(p.xs, totals)
	return p
}

// timeAxis is niceAxis with about twice the ticks, so the time axis ends
// close after the last event.
func timeAxis(v float64) (top, step float64) {
	_, step = niceAxis(v / 2)
	return math.Ceil(v/step) * step, step
}

func (p *memPlot) px(t float64) float64 {
	return memLeft + t*p.tscale/p.tmax*(memRight-memLeft)
}

func (p *memPlot) py(v float64) float64 {
	return memBottom - v/p.ytop*(memBottom-memTop)
}

// keepPoints thins the points to at most two per half pixel: in each, the
// one with the most bytes (so peaks stay) and the last (so the level that
// follows is right).
func keepPoints(xs, totals []float64) []int {
	var out []int
	for i := 0; i < len(xs); {
		col := math.Floor(xs[i] * 2)
		best, j := i, i
		for ; j < len(xs) && math.Floor(xs[j]*2) == col; j++ {
			if totals[j] > totals[best] {
				best = j
			}
		}
		out = append(out, best)
		if last := j - 1; last != best {
			out = append(out, last)
		}
		i = j
	}
	return out
}

func (p *memPlot) axes(bw *bufio.Writer) {
	x0, x1, y0, y1 := float64(memLeft), float64(memRight), float64(memBottom), float64(memTop)
	for v := 0.0; v <= p.ytop*(1+1e-9); v += p.ystep {
		y := p.py(v)
		fmt.Fprintf(bw, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", x0, y, x1, y)
		fmt.Fprintf(bw, `<text class="ytick" x="%.1f" y="%.1f" text-anchor="end">%s %s</text>`+"\n", x0-6, y+4, trimFloat(v/float64(p.unit)), p.unitName)
	}
	for v := 0.0; v <= p.tmax*(1+1e-9); v += p.tstep {
		x := x0 + v/p.tmax*(x1-x0)
		fmt.Fprintf(bw, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", x, y0, x, y1)
		fmt.Fprintf(bw, `<text class="xtick" x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, y0+18, trimFloat(v))
	}
	fmt.Fprintf(bw, `<path id="axes" d="M%.1f %.1f V%.1f H%.1f" fill="none" stroke="black"/>`+"\n", x0, y1, y0, x1)
	xlabel := fmt.Sprintf("time since the first event (%s)", p.tname)
	if len(p.tl.T) > 0 && p.tl.T[len(p.tl.T)-1] <= 0 {
		xlabel = "events (all at one instant)"
	}
	fmt.Fprintf(bw, `<text id="xlabel" x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", (x0+x1)/2, memH-30, esc(xlabel))
	fmt.Fprintf(bw, `<text id="ylabel" transform="translate(20 %.1f) rotate(-90)" text-anchor="middle">device memory</text>`+"\n", (y0+y1)/2)
}

// areas draws each layer as a stacked step area over the layers below it.
func (p *memPlot) areas(bw *bufio.Writer) {
	lower := make([]float64, len(p.tl.T))
	for l, layer := range p.tl.Layers {
		upper := make([]float64, len(layer))
		nonzero := false
		for i := range layer {
			upper[i] = lower[i] + layer[i]
			nonzero = nonzero || layer[i] > 0
		}
		if nonzero {
			var d strings.Builder
			p.step(&d, upper, true)
			p.step(&d, lower, false)
			d.WriteString("Z")
			fmt.Fprintf(bw, `<path class="area" d="%s" fill="%s" stroke="none"><title>%s</title></path>`+"\n",
				d.String(), p.color(l), esc(p.tl.Names[l]+", "+p.tl.Details[l]+": "+p.tl.Tips[l]))
		}
		lower = upper
	}
}

// step writes a step line through the kept points of v: forward from the
// first point (starting the path) or backward from the end.
func (p *memPlot) step(d *strings.Builder, v []float64, forward bool) {
	k := p.keep
	if forward {
		fmt.Fprintf(d, "M%.1f %.1f", p.xs[k[0]], p.py(v[k[0]]))
		for _, i := range k[1:] {
			fmt.Fprintf(d, "H%.1fV%.1f", p.xs[i], p.py(v[i]))
		}
		fmt.Fprintf(d, "H%.1f", p.xEnd)
		return
	}
	fmt.Fprintf(d, "V%.1f", p.py(v[k[len(k)-1]]))
	for j := len(k) - 1; j > 0; j-- {
		fmt.Fprintf(d, "H%.1fV%.1f", p.xs[k[j]], p.py(v[k[j-1]]))
	}
	fmt.Fprintf(d, "H%.1f", p.xs[k[0]])
}

func (p *memPlot) reserved(bw *bufio.Writer) {
	var d strings.Builder
	p.step(&d, p.tl.Reserved, true)
	fmt.Fprintf(bw, `<path class="reserved" d="%s" fill="none" stroke="black" stroke-width="1.5"><title>reserved: device bytes held from the driver</title></path>`+"\n", d.String())
}

// marks draws OOMs as red lines across the plot and retries and trims as
// small triangles on the time axis.
func (p *memPlot) marks(bw *bufio.Writer) {
	for _, m := range p.tl.Marks {
		x := p.px(m.T)
		if p.tl.T[len(p.tl.T)-1] <= 0 {
			continue
		}
		switch m.Kind {
		case core.MemoryOOM:
			fmt.Fprintf(bw, `<g class="mark oom"><line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#d00" stroke-dasharray="4 3"/><text x="%.1f" y="%d" fill="#d00" text-anchor="middle">OOM</text><title>%s</title></g>`+"\n",
				x, memTop, x, memBottom, x, memTop-4, esc(m.Text))
		default:
			color := "#e08000"
			if m.Kind == core.MemoryTrim {
				color = "#0060d0"
			}
			fmt.Fprintf(bw, `<path class="mark %s" d="M%.1f %d l-5 9 h10 z" fill="%s"><title>%s</title></path>`+"\n",
				m.Kind, x, memBottom-9, color, esc(m.Text))
		}
	}
}

func (p *memPlot) color(layer int) string {
	switch n := len(p.tl.Layers); layer {
	case n - 1:
		return earlierColor
	case n - 2:
		return otherColor
	}
	return siteColors[layer%len(siteColors)]
}

// legend lists the reserved line, then every layer drawn, top of the stack
// first: its colour, its name, and under it where and how much.
func (p *memPlot) legend(bw *bufio.Writer) {
	y := float64(memTop)
	fmt.Fprintf(bw, `<text x="%d" y="%.1f" font-weight="bold">allocated bytes, by allocation site</text>`+"\n", memLegendX, y)
	y += 24
	fmt.Fprintf(bw, `<g class="legend"><line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="black" stroke-width="2"/><text x="%d" y="%.1f">reserved (held from the driver)</text></g>`+"\n",
		memLegendX, y-4, memLegendX+22, y-4, memLegendX+30, y)
	y += 24
	for l := len(p.tl.Layers) - 1; l >= 0; l-- {
		if maxOf(p.tl.Layers[l]) == 0 {
			continue
		}
		fmt.Fprintf(bw, `<g class="legend"><rect x="%d" y="%.1f" width="22" height="22" fill="%s"/><text x="%d" y="%.1f">%s</text><text class="detail" x="%d" y="%.1f" font-size="11" fill="#555">%s</text><title>%s</title></g>`+"\n",
			memLegendX, y-11, p.color(l), memLegendX+30, y, esc(shorten(p.tl.Names[l], memLegendMax)),
			memLegendX+30, y+13, esc(shorten(p.tl.Details[l], memLegendMax)), esc(p.tl.Tips[l]))
		y += 34
	}
}

func maxOf(v []float64) float64 {
	m := 0.0
	for _, x := range v {
		m = math.Max(m, x)
	}
	return m
}

// shorten cuts s to n characters, marking the cut.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
