package loadtest

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Metrics are the process figures read from a server's /metrics.
type Metrics struct {
	HeapInuse  float64 // go_memstats_heap_inuse_bytes
	StackInuse float64 // go_memstats_stack_inuse_bytes (goroutine stacks: in RSS, not in the heap)
	RSS        float64 // process_resident_memory_bytes
	CPUSeconds float64 // process_cpu_seconds_total
	Goroutines float64 // go_goroutines
	Conns      float64 // ensemble_ws_connections
	Writes     float64 // ensemble_hub_writes_total
	Frames     float64 // ensemble_hub_frames_written_total
	Inline     float64 // ensemble_hub_inline_writes_total
	Deltas     float64 // ensemble_hub_deltas_applied_total
	DeltaGaps  float64 // ensemble_hub_delta_gaps_total
	DeltaDups  float64 // ensemble_hub_delta_duplicates_total
	Rereads    float64 // ensemble_hub_rereads_total
	Typed      float64 // ensemble_hub_typed_turns_total
	Commits    float64 // ensemble_sqlite_commits_total (embedded store only)
	Updates    float64 // ensemble_sqlite_updates_committed_total
	At         time.Time
}

// sub is m − o for the counters, as over a phase between two scrapes.
func (m Metrics) sub(o Metrics) Metrics {
	return m.counters(o, func(a, b float64) float64 { return a - b })
}

// add sums the counters of two replicas.
func (m Metrics) add(o Metrics) Metrics {
	return m.counters(o, func(a, b float64) float64 { return a + b })
}

// counters combines the counters of m and o field by field (the gauges are
// left zero).
func (m Metrics) counters(o Metrics, op func(a, b float64) float64) Metrics {
	return Metrics{Writes: op(m.Writes, o.Writes), Frames: op(m.Frames, o.Frames), Inline: op(m.Inline, o.Inline),
		Deltas: op(m.Deltas, o.Deltas), DeltaGaps: op(m.DeltaGaps, o.DeltaGaps), DeltaDups: op(m.DeltaDups, o.DeltaDups),
		Rereads: op(m.Rereads, o.Rereads), Typed: op(m.Typed, o.Typed), Commits: op(m.Commits, o.Commits),
		Updates: op(m.Updates, o.Updates), CPUSeconds: op(m.CPUSeconds, o.CPUSeconds)}
}

// ScrapeMetrics reads the Prometheus text of http://addr/metrics.
func ScrapeMetrics(ctx context.Context, addr string) (Metrics, error) {
	if err := CheckLoopback(addr); err != nil {
		return Metrics{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return Metrics{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Metrics{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Metrics{}, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	m := Metrics{At: time.Now()}
	want := map[string]*float64{
		"go_memstats_heap_inuse_bytes":            &m.HeapInuse,
		"go_memstats_stack_inuse_bytes":           &m.StackInuse,
		"process_resident_memory_bytes":           &m.RSS,
		"process_cpu_seconds_total":               &m.CPUSeconds,
		"go_goroutines":                           &m.Goroutines,
		"ensemble_ws_connections":                 &m.Conns,
		"ensemble_hub_writes_total":               &m.Writes,
		"ensemble_hub_frames_written_total":       &m.Frames,
		"ensemble_hub_inline_writes_total":        &m.Inline,
		"ensemble_hub_deltas_applied_total":       &m.Deltas,
		"ensemble_hub_delta_gaps_total":           &m.DeltaGaps,
		"ensemble_hub_delta_duplicates_total":     &m.DeltaDups,
		"ensemble_hub_rereads_total":              &m.Rereads,
		"ensemble_hub_typed_turns_total":          &m.Typed,
		"ensemble_sqlite_commits_total":           &m.Commits,
		"ensemble_sqlite_updates_committed_total": &m.Updates,
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		if p := want[name]; p != nil {
			if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
				*p = v
			}
		}
	}
	return m, sc.Err()
}

// scrapeRetry is ScrapeMetrics tried up to three times: a replica under
// a storm sometimes drops a fresh connection (EOF) before answering.
func scrapeRetry(ctx context.Context, addr string) (m Metrics, err error) {
	for range 3 {
		if m, err = ScrapeMetrics(ctx, addr); err == nil || ctx.Err() != nil {
			return m, err
		}
		time.Sleep(200 * time.Millisecond)
	}
	return m, err
}

// procMetrics reads RSS and CPU of a local process from /proc, for
// processes without /metrics (the reference server reports its own).
func procRSS(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				kb, _ := strconv.ParseFloat(f[1], 64)
				return kb * 1024
			}
		}
	}
	return 0
}

// selfCPU is the CPU time (user + system) this process has used: the
// harness's own share of a machine it shares with the servers.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
