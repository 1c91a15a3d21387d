package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// The storm scenarios at CI size: `ensemble loadtest` spawns two real
// replicas on PostgreSQL and Redis, subscribes 160 clients spread over
// both while sessions stream, then SIGKILLs one replica (storm) or sends
// it SIGTERM (storm-drain). Every client that was on it must resync on the
// survivor, at least 95% by resuming from its durable position
// (recovered:true), with no gap and no duplicate, while the clients that
// stayed keep receiving chunks. A small --max-subscribes makes the movers
// meet the admission control and obey its retryAfterMs. No timing is
// asserted.
func TestLoadtestStormAcrossReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns servers")
	}
	redisURL := clusterRedis(t)
	dbURL := clusterPostgres(t)
	out := t.TempDir()
	args := []string{"loadtest", "--quiet", "--no-references", "--out", out, "--max-time", "4m",
		"--scenarios", "storm,storm-drain", "--storm-clients", "160", "--storm-sessions", "4",
		"--storm-max-subscribes", "8", "--words", "40", "--rate", "5ms",
		"--backoff-base", "50ms", "--backoff-cap", "1s",
		"--database-url", dbURL, "--redis-url", redisURL}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
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
	var rep struct {
		Scenarios []struct {
			Name    string
			Skipped string
			Counts  []struct {
				Name  string
				Value any
			}
			Figures []struct {
				Name  string
				Value float64
			}
			Checks []struct {
				Name string
				OK   bool
				Info string
			}
		}
	}
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatalf("report.json: %v", err)
	}
	got := map[string]bool{}
	for _, s := range rep.Scenarios {
		got[s.Name] = true
		if s.Skipped != "" {
			t.Errorf("%s skipped: %s", s.Name, s.Skipped)
			continue
		}
		for _, c := range s.Checks {
			if !c.OK {
				t.Errorf("%s: check %q failed: %s", s.Name, c.Name, c.Info)
			}
		}
		counts := map[string]float64{}
		for _, c := range s.Counts {
			if v, ok := c.Value.(float64); ok {
				counts[c.Name] = v
			}
		}
		moved := counts["clients moved"]
		if moved != 80 || counts["resynced"] != moved || counts["never resynced"] != 0 {
			t.Errorf("%s: not every moved client resynced: %v", s.Name, counts)
		}
		if counts["recovered:true"]+counts["snapshot"] != counts["resynced"] {
			t.Errorf("%s: resumes and snapshots do not add up: %v", s.Name, counts)
		}
		if counts["recovered:true"] < 0.95*moved {
			t.Errorf("%s: %v of %v recovered:true, want ≥ 95%%", s.Name, counts["recovered:true"], moved)
		}
		if counts["gaps"] != 0 || counts["duplicates"] != 0 || counts["epoch changes"] != 0 ||
			counts["moved clients not at the survivor's last seq"] != 0 {
			t.Errorf("%s: gaps, duplicates or clients behind: %v", s.Name, counts)
		}
		if counts["chunks delivered to staying clients during the storm"] == 0 {
			t.Errorf("%s: nothing streamed during the storm: %v", s.Name, counts)
		}
		told := counts["told to reconnect (drain frame)"]
		if s.Name == "storm-drain" && told != moved {
			t.Errorf("storm-drain: %v of %v moved clients got the reconnect frame", told, moved)
		}
		if s.Name == "storm" && told != 0 {
			t.Errorf("storm: a SIGKILLed replica sent %v reconnect frames", told)
		}
	}
	for _, name := range []string{"storm", "storm-drain"} {
		if !got[name] {
			t.Errorf("scenario %s missing from the report", name)
		}
	}
	if runErr != nil && !t.Failed() {
		t.Errorf("ensemble loadtest: %v\nstderr:\n%s", runErr, stderr.String())
	}
}
