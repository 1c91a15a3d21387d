package main

import (
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
	scenarios, stderr, runErr := runStorm(t, "--scenarios", "storm,storm-drain")
	got := map[string]bool{}
	for _, s := range scenarios {
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
		counts := s.counts()
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
		t.Errorf("ensemble loadtest: %v\nstderr:\n%s", runErr, stderr)
	}
}

// The premise shape of issue 17, mostly idle tabs: a quarter of 160
// clients watch the streaming sessions, the rest watch quiet sessions of
// the same workspace. Both classes must resync on the survivor from their
// durable positions, with no gap or duplicate, and the report must count
// each class; the staying streaming watchers' chunks show the sessions
// streamed throughout. No timing is asserted.
func TestLoadtestStormMostlyIdle(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns servers")
	}
	scenarios, stderr, runErr := runStorm(t, "--scenarios", "storm",
		"--storm-streaming-share", "0.25", "--storm-idle-sessions", "3", "--storm-max-pending-hello", "4096")
	if len(scenarios) != 1 || scenarios[0].Name != "storm" {
		t.Fatalf("want one storm scenario, got %+v", scenarios)
	}
	s := scenarios[0]
	if s.Skipped != "" {
		t.Fatalf("storm skipped: %s", s.Skipped)
	}
	for _, c := range s.Checks {
		if !c.OK {
			t.Errorf("check %q failed: %s", c.Name, c.Info)
		}
	}
	params := map[string]any{}
	for _, p := range s.Params {
		params[p.Name] = p.Value
	}
	if params["streaming share (clients watching a streaming session)"] != 0.25 ||
		params["replica flags"] != "--max-subscribes 8 --max-pending-hello 4096" {
		t.Errorf("the shape and the replicas' flags are not in the report: %v", params)
	}
	counts := s.counts()
	// 80 pairs, a quarter of them streaming: 20 streaming and 60 idle
	// watchers move, as many stay.
	for class, moved := range map[string]float64{"streaming watchers": 20, "idle watchers": 60} {
		c := func(name string) float64 { return counts[class+": "+name] }
		if c("clients") != 2*moved || c("moved") != moved || c("resynced") != moved || c("never resynced") != 0 {
			t.Errorf("%s: want %v moved and resynced of %v: %v", class, moved, 2*moved, counts)
		}
		if c("recovered:true") < 0.95*moved || c("recovered:true")+c("snapshot") != moved {
			t.Errorf("%s: %v recovered:true, %v snapshots of %v moved", class, c("recovered:true"), c("snapshot"), moved)
		}
		if c("resumed from a durable position") != moved {
			t.Errorf("%s: %v of %v moved clients had a durable position to resume from", class, c("resumed from a durable position"), moved)
		}
		if c("gaps") != 0 || c("duplicates") != 0 || c("epoch changes") != 0 || c("moved clients not at the survivor's last seq") != 0 {
			t.Errorf("%s: gaps, duplicates or clients behind: %v", class, counts)
		}
	}
	if counts["clients moved"] != 80 || counts["resynced"] != 80 {
		t.Errorf("overall: %v moved, %v resynced, want 80", counts["clients moved"], counts["resynced"])
	}
	if counts["streaming watchers: events to staying clients during the storm"] == 0 ||
		counts["chunks delivered to staying clients during the storm"] != counts["streaming watchers: events to staying clients during the storm"] {
		t.Errorf("the staying streaming watchers' chunks must show streaming went on: %v", counts)
	}
	if runErr != nil && !t.Failed() {
		t.Errorf("ensemble loadtest: %v\nstderr:\n%s", runErr, stderr)
	}
}

// runStorm runs `ensemble loadtest` at CI size (160 clients over 4
// streaming sessions, two replicas on the test PostgreSQL and Redis) with
// extra flags and returns the report's scenarios, the command's stderr and
// its error.
func runStorm(t *testing.T, extra ...string) ([]loadtestScenario, string, error) {
	t.Helper()
	redisURL := clusterRedis(t)
	dbURL := clusterPostgres(t)
	out := t.TempDir()
	args := append([]string{"loadtest", "--quiet", "--no-references", "--out", out, "--max-time", "4m",
		"--storm-clients", "160", "--storm-sessions", "4",
		"--storm-max-subscribes", "8", "--words", "40", "--rate", "5ms",
		"--backoff-base", "50ms", "--backoff-cap", "1s",
		"--database-url", dbURL, "--redis-url", redisURL}, extra...)
	scenarios, _, stderr, err := runLoadtest(t, out, 5*time.Minute, args)
	return scenarios, stderr, err
}
