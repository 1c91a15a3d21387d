package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/internal/testenv"
)

// One short `ensemble loadtest` against replicas it spawns itself, with
// small counts: every scenario runs, its invariants hold, and the counts add
// up. No timing is asserted.
func TestLoadtestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns servers")
	}
	out := t.TempDir()
	args := []string{"loadtest", "--quiet", "--no-external", "--out", out,
		"--duration", "1s", "--max-time", "3m",
		"--workspaces", "2", "--watchers", "3", "--sessions", "1", "--words", "12", "--rate", "5ms",
		"--idle-conns", "40", "--idle-window", "1s",
		"--submit-concurrency", "1,2",
		"--reconnect-clients", "40", "--backoff-base", "20ms", "--backoff-cap", "500ms"}
	scenarios, stdout, stderr, err := runLoadtest(t, out, 4*time.Minute, args)
	if err != nil {
		t.Fatalf("ensemble loadtest: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	for _, f := range []string{"report.md", "report.svg"} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s missing or empty: %v", f, err)
		}
	}
	if !strings.Contains(stdout, "## fanout") {
		t.Errorf("the Markdown report was not printed:\n%s", stdout)
	}
	got := map[string]bool{}
	for _, s := range scenarios {
		got[s.Name] = true
		counts := s.counts()
		if s.Skipped != "" {
			t.Errorf("%s skipped: %s", s.Name, s.Skipped)
			continue
		}
		for _, c := range s.Checks {
			if !c.OK {
				t.Errorf("%s: check %q failed: %s", s.Name, c.Name, c.Info)
			}
		}
		refSeries := false
		for _, x := range s.Series {
			refSeries = refSeries || x.Reference
		}
		switch s.Name {
		case "fanout":
			if counts["chunk deliveries"] != counts["chunk deliveries expected"] || counts["chunk deliveries"] == 0 ||
				counts["chunk deliveries expected"] != counts["chunks emitted (canonical)"]*3 {
				t.Errorf("fanout counts do not add up: %v", counts)
			}
			if counts["gaps"] != 0 || counts["duplicates"] != 0 || counts["reference gaps"] != 0 || counts["reference duplicates"] != 0 {
				t.Errorf("fanout gaps or duplicates: %v", counts)
			}
			if !refSeries {
				t.Error("fanout has no bare-broadcast reference series")
			}
			// The replicas' hub counters over the measured phase: the chunks
			// went out as applied deltas, mostly written where they were applied.
			if counts["hub deltas applied"] == 0 || counts["hub writes inline"] == 0 || counts["hub writes inline"] > counts["hub writes"] {
				t.Errorf("fanout hub counters missing or inconsistent: %v", counts)
			}
			// The chunk latency split at the transcript write covers every
			// delivered chunk, as the chunk series does.
			n := map[string]int64{}
			for _, x := range s.Series {
				n[x.Name] = x.Latency.Count
			}
			chunks := n["Ensemble chunk: agent emission → watcher"]
			for _, name := range []string{"Ensemble chunk: agent emission → transcript write (updatedAt, ms resolution)",
				"Ensemble chunk: transcript write → watcher (updatedAt, ms resolution)"} {
				if chunks == 0 || n[name] != chunks {
					t.Errorf("fanout series %q has %d observations, want the %d chunks", name, n[name], chunks)
				}
			}
			// So does its split by the event that carried the chunk.
			first := n["Ensemble chunk, in the event that creates its message (message_update): agent emission → watcher"]
			later := n["Ensemble chunk, appended (message_delta): agent emission → watcher"]
			if first == 0 || later == 0 || first+later != chunks {
				t.Errorf("fanout chunk split: %d creating + %d appended, want both > 0 and %d in all", first, later, chunks)
			}
			// And the appended ones by their place in the answer: with 12
			// words an answer has 11 appended chunks, the last 10 its end
			// (known from the done delta) and the one before them early.
			early := n["Ensemble chunk, appended, an answer's 2nd to 10th: agent emission → watcher"]
			end := n["Ensemble chunk, appended, an answer's last 10: agent emission → watcher"]
			rest := n["Ensemble chunk, appended, the rest of the answer: agent emission → watcher"]
			if early == 0 || end == 0 || early+end+rest != later {
				t.Errorf("fanout appended split: %d early + %d in the end + %d rest, want early and end > 0 and %d in all", early, end, rest, later)
			}
		case "idle":
			if counts["connections open on the server"] != 40 {
				t.Errorf("idle: %v", counts)
			}
		case "submit":
			if counts["c=1 submits"] == 0 || counts["c=2 submits"] == 0 || counts["c=1 errors"] != 0 || counts["c=2 errors"] != 0 {
				t.Errorf("submit counts: %v", counts)
			}
		case "approve":
			if counts["interactions"] == 0 || counts["interactions with a winner"] != counts["interactions"] ||
				counts["answered (won, or identical to the winner)"]+counts["superseded"] != counts["responses"] ||
				counts["responses"]+counts["seen only after the race was decided"] != counts["interactions"]*3 || counts["failed"] != 0 {
				t.Errorf("approve counts do not add up: %v", counts)
			}
		case "reconnect":
			if counts["resynced"] != 40 || counts["gaps"] != 0 || counts["duplicates"] != 0 ||
				counts["clients not at the replica's last seq"] != 0 || counts["never resynced"] != 0 {
				t.Errorf("reconnect counts: %v", counts)
			}
			if counts["resumed without snapshot"]+counts["resynced from a snapshot"] != counts["resynced"] {
				t.Errorf("reconnect: resumes and snapshots do not add up: %v", counts)
			}
		}
	}
	for _, name := range []string{"fanout", "idle", "submit", "reconnect", "approve"} {
		if !got[name] {
			t.Errorf("scenario %s missing from the report", name)
		}
	}
}

// The fanout across two replicas on PostgreSQL and Redis: every chunk
// reaches every watcher once, the latency is split by whether the chunk
// crossed the bus, and the durable commit floor is measured beside it.
func TestLoadtestFanoutAcrossReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns servers")
	}
	if _, err := exec.LookPath("pgbench"); err != nil {
		testenv.Missing(t, "pgbench", err)
	}
	pgbench, err := url.Parse(testenv.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	pgbench.Path = "/ensemble_pgbench_cluster_test" // not the loadtest package's: packages test in parallel
	out := t.TempDir()
	args := []string{"loadtest", "--quiet", "--no-external", "--out", out, "--scenarios", "fanout",
		"--replicas", "2", "--database-url", clusterPostgres(t), "--redis-url", clusterRedis(t), "--pgbench-url", pgbench.String(),
		"--duration", "2s", "--max-time", "3m",
		"--workspaces", "2", "--watchers", "2", "--sessions", "1", "--words", "12", "--rate", "5ms"}
	scenarios, stdout, stderr, err := runLoadtest(t, out, 4*time.Minute, args)
	if err != nil {
		t.Fatalf("ensemble loadtest: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	if len(scenarios) != 1 || scenarios[0].Name != "fanout" || scenarios[0].Skipped != "" {
		t.Fatalf("want the fanout scenario run: %+v", scenarios)
	}
	s := scenarios[0]
	counts := s.counts()
	if counts["chunk deliveries"] == 0 || counts["chunk deliveries"] != counts["chunk deliveries expected"] ||
		counts["gaps"] != 0 || counts["duplicates"] != 0 {
		t.Errorf("fanout across replicas: %v", counts)
	}
	n := map[string]int64{}
	for _, x := range s.Series {
		n[x.Name] = x.Latency.Count
	}
	chunks := n["Ensemble chunk: agent emission → watcher"]
	local := n["Ensemble chunk, watcher on the driver's replica: agent emission → watcher"]
	remote := n["Ensemble chunk, watcher on another replica (through the bus): agent emission → watcher"]
	// Each watcher watches one session on its replica and one on the other.
	if local == 0 || remote == 0 || local+remote != chunks || local != remote {
		t.Errorf("chunks split %d on the driver's replica + %d through the bus, want two equal halves of %d", local, remote, chunks)
	}
	floor := n["durable commit floor: pgbench -N, 2 clients at 400 tx/s (the chunk commit rate)"]
	// 2 s at 400/s; a slow disk may fall behind the schedule, never ahead.
	if floor < 100 || floor > 900 {
		t.Errorf("durable commit floor: %d transactions, want up to about 800 (2 s at 400/s): %v", floor, n)
	}

	// --no-commit-floor leaves it out and keeps the bare server.
	args[slices.Index(args, "2s")] = "1s"
	scenarios, stdout, stderr, err = runLoadtest(t, out, 4*time.Minute, append(args, "--no-commit-floor"))
	if err != nil {
		t.Fatalf("ensemble loadtest --no-commit-floor: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	for _, x := range scenarios[0].Series {
		if strings.HasPrefix(x.Name, "durable commit floor") {
			t.Errorf("--no-commit-floor ran the floor: %q", x.Name)
		}
	}
	if refs := scenarios[0].Series; len(refs) == 0 || !refs[len(refs)-1].Reference {
		t.Errorf("--no-commit-floor: the bare server's series should be the last: %+v", refs)
	}
}

// Non-loopback targets are refused before anything is sent.
func TestLoadtestRefusesRemoteTargets(t *testing.T) {
	for _, target := range []string{"10.0.0.5:8080", "example.com:80"} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), []string{"loadtest", "--target", target, "--jwt-secret", strings.Repeat("s", 32)}, &stdout, &stderr)
		if code == 0 || !strings.Contains(stderr.String(), "not a loopback address") {
			t.Errorf("--target %s: exit %d, stderr %q", target, code, stderr.String())
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"loadtest", "--redis-url", "redis://192.168.1.9:6379"}, &stdout, &stderr); code == 0 ||
		!strings.Contains(stderr.String(), "not a loopback address") {
		t.Errorf("--redis-url 192.168.1.9: exit %d, stderr %q", code, stderr.String())
	}
}

// loadtestScenario is the part of a scenario in report.json the tests
// read.
type loadtestScenario struct {
	Name    string
	Skipped string
	Params  []struct {
		Name  string
		Value any
	}
	Counts []struct {
		Name  string
		Value any
	}
	Checks []struct {
		Name string
		OK   bool
		Info string
	}
	Series []struct {
		Name      string
		Reference bool
		Latency   struct{ Count int64 }
	}
}

// counts maps the scenario's numeric counts by name.
func (s loadtestScenario) counts() map[string]float64 {
	m := map[string]float64{}
	for _, c := range s.Counts {
		if v, ok := c.Value.(float64); ok {
			m[c.Name] = v
		}
	}
	return m
}

// runLoadtest runs the ensemble binary with args (which write their report
// to out), killing it after timeout, and returns the report's scenarios, the command's output and its
// error; a missing or unreadable report fails the test at once.
func runLoadtest(t *testing.T, out string, timeout time.Duration, args []string) ([]loadtestScenario, string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, ensembleBinary(t), args...)
	cmd.Env = append(os.Environ(), "ENSEMBLE_JWT_SECRET=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	data, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatalf("report.json: %v (loadtest: %v)\nstdout:\n%s\nstderr:\n%s", err, runErr, stdout.String(), stderr.String())
	}
	var rep struct{ Scenarios []loadtestScenario }
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatalf("report.json: %v", err)
	}
	return rep.Scenarios, stdout.String(), stderr.String(), runErr
}
