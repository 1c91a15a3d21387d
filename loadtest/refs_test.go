package loadtest

import (
	"context"
	"errors"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/internal/testenv"
)

func TestReadPgbenchLog(t *testing.T) {
	lat := NewLatency()
	log := "0 1 650 0 1764800000 123456 40\n" +
		"1 1 skipped 0 1764800000 123999 5000\n" +
		"0 2 2100 0 1764800001 1000 0\n"
	if err := readPgbenchLog(strings.NewReader(log), lat); err != nil {
		t.Fatal(err)
	}
	s := lat.Summary()
	if s.Count != 2 || s.Max < 2.09 || s.Max > 2.11 || s.P50 < 0.64 || s.P50 > 0.66 {
		t.Fatalf("want 2 latencies, 0.65 ms and 2.1 ms; got %+v", s)
	}
	for _, bad := range []string{"0 1 650\n", "0 1 abc 0 1764800000 1\n"} {
		if err := readPgbenchLog(strings.NewReader(bad), NewLatency()); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// The durable commit floor is pgbench -N's per-transaction latency at a
// fixed rate, read from its own log.
func TestCommitFloorRunsPgbenchAtTheRate(t *testing.T) {
	if _, err := exec.LookPath("pgbench"); err != nil {
		testenv.Missing(t, "pgbench", err)
	}
	u, err := url.Parse(testenv.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/ensemble_pgbench_test"
	r := &runner{cfg: Config{PgbenchURL: u.String()}}
	lat, cmd, err := r.commitFloor(context.Background(), 2, 100, 2*time.Second)
	var exit *exec.ExitError
	if err != nil && (errors.As(err, &exit) || strings.Contains(err.Error(), "connection")) {
		testenv.Missing(t, "PostgreSQL for pgbench", err)
	}
	if err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	if !strings.Contains(cmd, "-R 100") || strings.Contains(cmd, "--log-prefix") {
		t.Errorf("command shown as %q: want the rate, not the temporary log path", cmd)
	}
	// 100 transactions a second for 2 s, give or take the start and end.
	if n := lat.Count(); n < 120 || n > 260 {
		t.Fatalf("%d transactions logged, want about 200", n)
	}
	if s := lat.Summary(); s.P50 <= 0 || s.P99 < s.P50 {
		t.Fatalf("latencies %+v", s)
	}
}
