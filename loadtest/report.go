package loadtest

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Report is the outcome of one `ensemble loadtest` run.
type Report struct {
	Started    time.Time `json:"started"`
	Finished   time.Time `json:"finished"`
	Command    string    `json:"command,omitempty"`
	Machine    Machine   `json:"machine"`
	Setup      Setup     `json:"setup"`
	Scenarios  []*Result `json:"scenarios"`
	References []*RefFig `json:"references"`
	Notes      []string  `json:"notes,omitempty"`
}

// Machine describes where the run happened.
type Machine struct {
	CPUs      int    `json:"cpus"`
	GoVersion string `json:"goVersion"`
	OS        string `json:"os"`
	MemTotal  string `json:"memTotal,omitempty"`
	// LoadAvg is /proc/loadavg at the start and the end: other work on the
	// machine shares its cores with the run.
	LoadAvgStart string `json:"loadAvgStart,omitempty"`
	LoadAvgEnd   string `json:"loadAvgEnd,omitempty"`
}

// Setup describes what was measured.
type Setup struct {
	Replicas int      `json:"replicas"`
	Targets  []string `json:"targets"`
	Spawned  bool     `json:"spawned"`
	Store    string   `json:"store"`
	Bus      string   `json:"bus"`
}

// Result is one scenario's outcome.
type Result struct {
	Name    string    `json:"name"`
	Params  []KV      `json:"params,omitempty"`
	Seconds float64   `json:"seconds"`
	Skipped string    `json:"skipped,omitempty"`
	Series  []*Series `json:"series,omitempty"`
	Counts  []KV      `json:"counts,omitempty"`
	Figures []Figure  `json:"figures,omitempty"`
	Ratios  []Ratio   `json:"ratios,omitempty"`
	Targets []Target  `json:"targets,omitempty"`
	Checks  []Check   `json:"checks,omitempty"`
	Notes   []string  `json:"notes,omitempty"`
}

// KV is one named value, in order.
type KV struct {
	Name  string `json:"name"`
	Value any    `json:"value"`
}

// Series is one measured stream: latency percentiles and throughput over
// time. Reference series are measured in the same run on a reference
// server.
type Series struct {
	Name       string  `json:"name"`
	Reference  bool    `json:"reference,omitempty"`
	Latency    Summary `json:"latency"`
	Throughput float64 `json:"throughputPerSec"`
	Unit       string  `json:"unit"` // what Throughput counts
	PerSecond  []int64 `json:"perSecond,omitempty"`
}

// Figure is one scalar measurement.
type Figure struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
}

// Ratio is an Ensemble figure divided by its reference.
type Ratio struct {
	Name      string  `json:"name"`
	Ensemble  float64 `json:"ensemble"`
	Reference float64 `json:"reference"`
	Unit      string  `json:"unit"`
	Ratio     float64 `json:"ratio"`
	Against   string  `json:"against"`
}

// Target is a goal from the issue and where the run stands.
type Target struct {
	Name     string `json:"name"`
	Goal     string `json:"goal"`
	Measured string `json:"measured"`
	Met      bool   `json:"met"`
}

// Check is an invariant the run verified (zero gaps, counts add up).
type Check struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	Info string `json:"info"`
}

// RefFig is a reference figure from an outside tool.
type RefFig struct {
	Name    string  `json:"name"`
	Value   float64 `json:"value,omitempty"`
	Unit    string  `json:"unit,omitempty"`
	Command string  `json:"command,omitempty"`
	Skipped string  `json:"skipped,omitempty"`
}

func newReport() *Report {
	return &Report{Started: time.Now().UTC(), Machine: Machine{CPUs: runtime.NumCPU(),
		GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH, MemTotal: memTotal(), LoadAvgStart: loadAvg()}}
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func memTotal() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "MemTotal:") {
			var kb float64
			fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(line, "MemTotal:")), "%f", &kb)
			return fmt.Sprintf("%.1f GiB", kb/(1<<20))
		}
	}
	return ""
}

// OK reports whether every invariant check passed.
func (r *Report) OK() bool {
	for _, s := range r.Scenarios {
		for _, c := range s.Checks {
			if !c.OK {
				return false
			}
		}
	}
	return true
}

func (r *Result) count(name string, v any) { r.Counts = append(r.Counts, KV{name, v}) }
func (r *Result) param(name string, v any) { r.Params = append(r.Params, KV{name, v}) }
func (r *Result) figure(name string, v float64, unit string) {
	r.Figures = append(r.Figures, Figure{name, v, unit})
}
func (r *Result) check(name string, ok bool, format string, args ...any) {
	r.Checks = append(r.Checks, Check{name, ok, fmt.Sprintf(format, args...)})
}
func (r *Result) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

// ratio records ens/ref; lower-is-better or not is in the name.
func (r *Result) ratio(name string, ens, ref float64, unit, against string) {
	v := math.NaN()
	if ref != 0 {
		v = ens / ref
	}
	r.Ratios = append(r.Ratios, Ratio{Name: name, Ensemble: ens, Reference: ref, Unit: unit, Ratio: v, Against: against})
}

// series adds a latency/throughput series.
func (r *Result) series(name string, ref bool, l *Latency, tl *Timeline, seconds float64, unit string) *Series {
	s := &Series{Name: name, Reference: ref, Latency: l.Summary(), Unit: unit}
	if tl != nil {
		s.PerSecond = tl.PerSecond()
		if seconds > 0 {
			s.Throughput = float64(tl.Total()) / seconds
		}
	}
	r.Series = append(r.Series, s)
	return s
}

// Write stores report.json, report.md and report.svg in dir.
func (r *Report) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(r.Markdown()), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "report.svg"), r.SVG(), 0o644)
}

// MarshalJSON writes NaN ratios as null.
func (x Ratio) MarshalJSON() ([]byte, error) {
	type plain Ratio
	v := struct {
		plain
		Ratio *float64 `json:"ratio"`
	}{plain: plain(x)}
	if !math.IsNaN(x.Ratio) && !math.IsInf(x.Ratio, 0) {
		v.Ratio = &x.Ratio
	}
	return json.Marshal(v)
}

func fnum(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return "n/a"
	case v == 0:
		return "0"
	case math.Abs(v) >= 1000:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.1f", v)
	case math.Abs(v) >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

// Markdown renders the report as tables.
func (r *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Ensemble load test — %s\n\n", r.Started.Format(time.RFC3339))
	fmt.Fprintf(&b, "Machine: %d CPUs, %s, %s, %s. Replicas: %d (%s store, %s bus, %s).\n\n",
		r.Machine.CPUs, r.Machine.MemTotal, r.Machine.OS, r.Machine.GoVersion, r.Setup.Replicas,
		r.Setup.Store, r.Setup.Bus, map[bool]string{true: "spawned by the harness", false: "already running"}[r.Setup.Spawned])
	if r.Machine.LoadAvgStart != "" {
		fmt.Fprintf(&b, "Load average (1/5/15 min) at the start: %s; at the end: %s.\n\n", r.Machine.LoadAvgStart, r.Machine.LoadAvgEnd)
	}
	if r.Command != "" {
		fmt.Fprintf(&b, "Command: `%s`\n\n", r.Command)
	}
	for _, s := range r.Scenarios {
		fmt.Fprintf(&b, "## %s\n\n", s.Name)
		if s.Skipped != "" {
			fmt.Fprintf(&b, "Not run: %s\n\n", s.Skipped)
			continue
		}
		if len(s.Params) > 0 {
			var ps []string
			for _, p := range s.Params {
				ps = append(ps, fmt.Sprintf("%s=%v", p.Name, p.Value))
			}
			fmt.Fprintf(&b, "Parameters: %s; measured %.1f s.\n\n", strings.Join(ps, ", "), s.Seconds)
		}
		if len(s.Series) > 0 {
			b.WriteString("| series | count | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | throughput |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
			for _, x := range s.Series {
				name := x.Name
				if x.Reference {
					name += " (reference)"
				}
				l := x.Latency
				thr := ""
				if x.Unit != "" {
					thr = fnum(x.Throughput) + " " + x.Unit + "/s"
				}
				fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s | %s |\n", name, l.Count,
					fnum(l.P50), fnum(l.P90), fnum(l.P99), fnum(l.P999), fnum(l.Max), thr)
			}
			b.WriteString("\n")
		}
		if len(s.Figures) > 0 {
			b.WriteString("| figure | value |\n|---|---:|\n")
			for _, f := range s.Figures {
				fmt.Fprintf(&b, "| %s | %s %s |\n", f.Name, fnum(f.Value), f.Unit)
			}
			b.WriteString("\n")
		}
		if len(s.Ratios) > 0 {
			b.WriteString("| ratio | Ensemble | reference | Ensemble ÷ reference | reference is |\n|---|---:|---:|---:|---|\n")
			for _, x := range s.Ratios {
				fmt.Fprintf(&b, "| %s | %s %s | %s %s | **%s×** | %s |\n", x.Name, fnum(x.Ensemble), x.Unit,
					fnum(x.Reference), x.Unit, fnum(x.Ratio), x.Against)
			}
			b.WriteString("\n")
		}
		if len(s.Counts) > 0 {
			var cs []string
			for _, c := range s.Counts {
				cs = append(cs, fmt.Sprintf("%s %v", c.Name, c.Value))
			}
			fmt.Fprintf(&b, "Counts: %s.\n\n", strings.Join(cs, ", "))
		}
		for _, t := range s.Targets {
			mark := "not met"
			if t.Met {
				mark = "met"
			}
			fmt.Fprintf(&b, "- Target %s: %s — measured %s (**%s**)\n", t.Name, t.Goal, t.Measured, mark)
		}
		for _, c := range s.Checks {
			mark := "ok"
			if !c.OK {
				mark = "FAILED"
			}
			fmt.Fprintf(&b, "- Check %s: %s (%s)\n", c.Name, mark, c.Info)
		}
		for _, n := range s.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
		b.WriteString("\n")
	}
	if len(r.References) > 0 {
		b.WriteString("## Reference figures\n\n| reference | value | command |\n|---|---:|---|\n")
		for _, x := range r.References {
			if x.Skipped != "" {
				fmt.Fprintf(&b, "| %s | skipped: %s | %s |\n", x.Name, x.Skipped, codeOrEmpty(x.Command))
				continue
			}
			fmt.Fprintf(&b, "| %s | %s %s | %s |\n", x.Name, fnum(x.Value), x.Unit, codeOrEmpty(x.Command))
		}
		b.WriteString("\n")
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	return b.String()
}

func codeOrEmpty(s string) string {
	if s == "" {
		return ""
	}
	return "`" + strings.ReplaceAll(s, "|", `\|`) + "`"
}
