package loadtest

import (
	"encoding/json"
	"encoding/xml"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func sampleReport() *Report {
	r := newReport()
	r.Setup = Setup{Replicas: 2, Store: "sqlite", Bus: "in-process"}
	res := &Result{Name: "fanout", Seconds: 3}
	res.param("watchers", 10)
	ens, ref := NewLatency(), NewLatency()
	tl, rtl := NewTimeline(), NewTimeline()
	for i := 1; i <= 100; i++ {
		ens.Record(time.Duration(i) * 100 * time.Microsecond)
		ref.Record(time.Duration(i) * 10 * time.Microsecond)
		tl.AddAt(tl.start.Add(time.Duration(i)*20*time.Millisecond), 1)
		rtl.AddAt(rtl.start.Add(time.Duration(i)*20*time.Millisecond), 2)
	}
	res.series("chunk → watcher <&>", false, ens, tl, 2, "chunks")
	res.series("bare broadcast", true, ref, rtl, 2, "chunks")
	res.ratio("p99 latency", ens.Summary().P99, ref.Summary().P99, "ms", "bare broadcast")
	res.ratio("undefined", 1, 0, "ms", "nothing")
	res.count("gaps", 0)
	res.check("no gaps", true, "0 gaps")
	res.Targets = append(res.Targets, Target{Name: "fanout p99", Goal: "≤ 2×", Measured: "10×", Met: false})
	r.Scenarios = append(r.Scenarios, res, &Result{Name: "approve", Skipped: "interaction.respond is unsupported"})
	r.References = append(r.References, &RefFig{Name: "redis-benchmark PUBLISH", Value: 123456, Unit: "req/s", Command: "redis-benchmark -q PUBLISH c m"},
		&RefFig{Name: "pgbench -N", Skipped: "pgbench not installed"})
	return r
}

func TestReportOutputs(t *testing.T) {
	r := sampleReport()
	dir := t.TempDir()
	if err := r.Write(dir); err != nil {
		t.Fatal(err)
	}
	// JSON round-trips; an undefined ratio is null, not NaN.
	js, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Scenarios []struct {
			Name   string
			Series []Series
			Ratios []struct {
				Name  string
				Ratio *float64
			}
		}
	}
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatalf("report.json: %v", err)
	}
	if len(back.Scenarios) != 2 || len(back.Scenarios[0].Series) != 2 || back.Scenarios[0].Series[0].Latency.Count != 100 {
		t.Fatalf("report.json = %s", js)
	}
	if rs := back.Scenarios[0].Ratios; rs[0].Ratio == nil || math.Abs(*rs[0].Ratio-10) > 0.1 || rs[1].Ratio != nil {
		t.Errorf("ratios = %s", js)
	}
	if tp := back.Scenarios[0].Series[0].Throughput; tp != 50 {
		t.Errorf("throughput = %v, want 100 events / 2 s", tp)
	}

	md, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	for _, want := range []string{"## fanout", "| p99 latency |", "**10.00×**", "Not run: interaction.respond", "skipped: pgbench not installed",
		"Target fanout p99", "(**not met**)", "Check no gaps: ok", "| chunk → watcher <&> | 100 |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}

	// The SVG is well-formed XML with escaped text, one polyline per series
	// per chart, and a ratio bar.
	svg, _ := os.ReadFile(filepath.Join(dir, "report.svg"))
	dec := xml.NewDecoder(strings.NewReader(string(svg)))
	polylines, rects, texts := 0, 0, []string{}
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("report.svg is not well-formed: %v\n%s", err, svg)
		}
		switch e := tok.(type) {
		case xml.StartElement:
			switch e.Name.Local {
			case "polyline":
				polylines++
			case "rect":
				rects++
			}
		case xml.CharData:
			texts = append(texts, string(e))
		}
	}
	if polylines != 4 {
		t.Errorf("%d polylines, want 2 series × 2 charts", polylines)
	}
	if rects < 2 { // background + one defined ratio
		t.Errorf("%d rects", rects)
	}
	all := strings.Join(texts, "|")
	for _, want := range []string{"chunk → watcher <&>", "bare broadcast (reference)", "fanout: p99 latency", "p99.9"} {
		if !strings.Contains(all, want) {
			t.Errorf("SVG text lacks %q", want)
		}
	}
	if !r.OK() {
		t.Error("OK() = false with only passing checks")
	}
	r.Scenarios[0].check("broken", false, "x")
	if r.OK() {
		t.Error("OK() = true with a failed check")
	}
}

func TestNiceCeilAndFnum(t *testing.T) {
	for in, want := range map[float64]float64{0.7: 1, 3: 5, 12: 20, 100: 100, 4999: 5000} {
		if got := niceCeil(in); got != want {
			t.Errorf("niceCeil(%v) = %v, want %v", in, got, want)
		}
	}
	for in, want := range map[float64]string{0: "0", 1234.5: "1234", 12.345: "12.35", 0.01234: "0.012", math.NaN(): "n/a"} {
		if got := fnum(in); got != want {
			t.Errorf("fnum(%v) = %q, want %q", in, got, want)
		}
	}
}

// Issue 10 bounds the fan-out p99 at 2× the bare server on one replica and
// 3× across replicas; a two-replica run must not be judged by the first.
func TestFanoutP99LimitFollowsReplicas(t *testing.T) {
	for replicas, want := range map[int]float64{1: 2, 2: 3, 4: 3} {
		if got := fanoutP99Limit(replicas); got != want {
			t.Errorf("fanoutP99Limit(%d) = %g, want %g", replicas, got, want)
		}
	}
}
