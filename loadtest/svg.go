package loadtest

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"strings"
)

// SVG draws the report by hand: for every scenario with measured series,
// latency percentiles (log scale) next to throughput over time, and at the
// end every Ensemble ÷ reference ratio as a bar against the 1× line.
func (r *Report) SVG() []byte {
	const width, panelH, gap = 1000.0, 300.0, 30.0
	var panels []func(b *bytes.Buffer, y float64)
	for _, s := range r.Scenarios {
		if len(s.Series) == 0 {
			continue
		}
		panels = append(panels, func(b *bytes.Buffer, y float64) { scenarioPanel(b, s, y, width, panelH) })
	}
	var ratios []Ratio
	for _, s := range r.Scenarios {
		for _, x := range s.Ratios {
			if !math.IsNaN(x.Ratio) && !math.IsInf(x.Ratio, 0) && x.Ratio > 0 {
				x.Name = s.Name + ": " + x.Name
				ratios = append(ratios, x)
			}
		}
	}
	ratioH := 60 + 24*float64(len(ratios))
	height := 50 + float64(len(panels))*(panelH+gap)
	if len(ratios) > 0 {
		height += ratioH + gap
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="20" y="28" font-size="16" font-weight="bold">%s</text>`+"\n",
		esc(fmt.Sprintf("Ensemble load test %s — %d CPUs, %d replica(s), %s store, %s bus",
			r.Started.Format("2006-01-02 15:04"), r.Machine.CPUs, r.Setup.Replicas, r.Setup.Store, r.Setup.Bus)))
	y := 50.0
	for _, p := range panels {
		p(&b, y)
		y += panelH + gap
	}
	if len(ratios) > 0 {
		ratioPanel(&b, ratios, y, width, ratioH)
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"}

func esc(s string) string { return html.EscapeString(s) }

// scenarioPanel: latency percentiles (left) and throughput over time (right).
func scenarioPanel(b *bytes.Buffer, s *Result, y, width, h float64) {
	fmt.Fprintf(b, `<text x="20" y="%.0f" font-size="14" font-weight="bold">%s</text>`+"\n", y+14, esc(s.Name))
	top, bottom := y+30, y+h-60
	// Left: percentiles on a log scale.
	lx0, lx1 := 70.0, width/2-30
	labels := []string{"p50", "p90", "p99", "p99.9", "max"}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, x := range s.Series {
		if x.Latency.Count == 0 {
			continue
		}
		for _, v := range pcts(x.Latency) {
			v = math.Max(v, 0.001)
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	if math.IsInf(lo, 1) {
		lo, hi = 0.1, 1
	}
	dlo, dhi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if dhi <= dlo {
		dhi = dlo + 1
	}
	ly := func(v float64) float64 {
		return bottom - (math.Log10(math.Max(v, 0.001))-dlo)/(dhi-dlo)*(bottom-top)
	}
	fmt.Fprintf(b, `<text x="%.0f" y="%.0f" fill="#444">latency (ms, log scale)</text>`+"\n", lx0, top-4)
	for d := dlo; d <= dhi; d++ {
		yy := ly(math.Pow(10, d))
		fmt.Fprintf(b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#ddd"/>`+"\n", lx0, yy, lx1, yy)
		fmt.Fprintf(b, `<text x="%.0f" y="%.1f" text-anchor="end" fill="#444">%s</text>`+"\n", lx0-6, yy+4, esc(fnum(math.Pow(10, d))))
	}
	step := (lx1 - lx0) / float64(len(labels)-1)
	for i, l := range labels {
		fmt.Fprintf(b, `<text x="%.1f" y="%.0f" text-anchor="middle" fill="#444">%s</text>`+"\n", lx0+float64(i)*step, bottom+16, l)
	}
	fmt.Fprintf(b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#444"/>`+"\n", lx0, bottom, lx1, bottom)
	for i, x := range s.Series {
		if x.Latency.Count == 0 {
			continue
		}
		c := palette[i%len(palette)]
		dash := ""
		if x.Reference {
			dash = ` stroke-dasharray="6 4"`
		}
		var pts []string
		for j, v := range pcts(x.Latency) {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", lx0+float64(j)*step, ly(v)))
		}
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", strings.Join(pts, " "), c, dash)
		for _, p := range pts {
			xy := strings.Split(p, ",")
			fmt.Fprintf(b, `<circle cx="%s" cy="%s" r="3" fill="%s"/>`+"\n", xy[0], xy[1], c)
		}
	}
	// Right: throughput per second.
	rx0, rx1 := width/2+50, width-30
	var maxV float64
	var maxT int
	for _, x := range s.Series {
		for _, v := range x.PerSecond {
			maxV = math.Max(maxV, float64(v))
		}
		maxT = max(maxT, len(x.PerSecond))
	}
	if maxV == 0 {
		maxV = 1
	}
	maxV = niceCeil(maxV)
	if maxT < 2 {
		maxT = 2
	}
	ry := func(v float64) float64 { return bottom - v/maxV*(bottom-top) }
	rxf := func(t int) float64 { return rx0 + float64(t)/float64(maxT-1)*(rx1-rx0) }
	fmt.Fprintf(b, `<text x="%.0f" y="%.0f" fill="#444">throughput per second over time (s)</text>`+"\n", rx0, top-4)
	for i := 0; i <= 4; i++ {
		v := maxV * float64(i) / 4
		fmt.Fprintf(b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#ddd"/>`+"\n", rx0, ry(v), rx1, ry(v))
		fmt.Fprintf(b, `<text x="%.0f" y="%.1f" text-anchor="end" fill="#444">%s</text>`+"\n", rx0-6, ry(v)+4, esc(fnum(v)))
	}
	for _, t := range []int{0, (maxT - 1) / 2, maxT - 1} {
		fmt.Fprintf(b, `<text x="%.1f" y="%.0f" text-anchor="middle" fill="#444">%d</text>`+"\n", rxf(t), bottom+16, t)
	}
	fmt.Fprintf(b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#444"/>`+"\n", rx0, bottom, rx1, bottom)
	for i, x := range s.Series {
		if len(x.PerSecond) == 0 {
			continue
		}
		c := palette[i%len(palette)]
		dash := ""
		if x.Reference {
			dash = ` stroke-dasharray="6 4"`
		}
		var pts []string
		for t, v := range x.PerSecond {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", rxf(t), ry(float64(v))))
		}
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", strings.Join(pts, " "), c, dash)
	}
	// Legend under both charts.
	lxp, lyp := 70.0, bottom+36
	for i, x := range s.Series {
		c := palette[i%len(palette)]
		name := x.Name
		if x.Reference {
			name += " (reference)"
		}
		if x.Unit != "" {
			name += fmt.Sprintf(" — %s %s/s", fnum(x.Throughput), x.Unit)
		}
		w := 30 + 6.5*float64(len([]rune(name)))
		if lxp+w > width-20 {
			lxp, lyp = 70, lyp+18
		}
		dash := ""
		if x.Reference {
			dash = ` stroke-dasharray="6 4"`
		}
		fmt.Fprintf(b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="%s" stroke-width="3"%s/>`+"\n", lxp, lyp-4, lxp+20, lyp-4, c, dash)
		fmt.Fprintf(b, `<text x="%.0f" y="%.0f">%s</text>`+"\n", lxp+25, lyp, esc(name))
		lxp += w
	}
}

func pcts(s Summary) []float64 { return []float64{s.P50, s.P90, s.P99, s.P999, s.Max} }

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// ratioPanel: every ratio as a horizontal bar on a log scale around 1×.
func ratioPanel(b *bytes.Buffer, rs []Ratio, y, width, h float64) {
	fmt.Fprintf(b, `<text x="20" y="%.0f" font-size="14" font-weight="bold">Ensemble ÷ reference (log scale; 1× = as good as the reference)</text>`+"\n", y+14)
	x0, x1 := 420.0, width-80
	lo, hi := 1.0, 1.0
	for _, r := range rs {
		lo, hi = math.Min(lo, r.Ratio), math.Max(hi, r.Ratio)
	}
	dlo, dhi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if dhi <= dlo {
		dhi = dlo + 1
	}
	xs := func(v float64) float64 { return x0 + (math.Log10(v)-dlo)/(dhi-dlo)*(x1-x0) }
	top := y + 30
	bottom := y + h - 10
	for d := dlo; d <= dhi; d++ {
		xx := xs(math.Pow(10, d))
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#ddd"/>`+"\n", xx, top, xx, bottom)
		fmt.Fprintf(b, `<text x="%.1f" y="%.0f" text-anchor="middle" fill="#444">%s×</text>`+"\n", xx, bottom+12, esc(fnum(math.Pow(10, d))))
	}
	one := xs(1)
	for i, r := range rs {
		yy := top + 6 + 24*float64(i)
		fmt.Fprintf(b, `<text x="%.0f" y="%.0f" text-anchor="end">%s</text>`+"\n", x0-8, yy+12, esc(truncate(r.Name, 60)))
		xa, xb := math.Min(one, xs(r.Ratio)), math.Max(one, xs(r.Ratio))
		fmt.Fprintf(b, `<rect x="%.1f" y="%.0f" width="%.1f" height="16" fill="%s"/>`+"\n", xa, yy, math.Max(xb-xa, 1), palette[i%len(palette)])
		fmt.Fprintf(b, `<text x="%.1f" y="%.0f">%s×</text>`+"\n", xb+4, yy+12, esc(fnum(r.Ratio)))
	}
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="black" stroke-width="1.5"/>`+"\n", one, top, one, bottom)
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
