package loadtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// externalReferences runs redis-benchmark (PUBLISH) and pgbench -N on this
// machine, each skipped with a note when the tool or its server is missing.
func (r *runner) externalReferences(ctx context.Context) {
	r.progress.set(func() string { return "reference: redis-benchmark PUBLISH" })
	rb := r.redisBenchmark(ctx)
	r.refs["redis"] = rb
	r.progress.set(func() string { return "reference: pgbench -N" })
	pg := r.pgbench(ctx)
	r.refs["pgbench"] = pg
	r.rep.References = append(r.rep.References, rb, pg)
}

var redisCSV = regexp.MustCompile(`^"PUBLISH[^"]*","([0-9.]+)"`)

func (r *runner) redisBenchmark(ctx context.Context) *RefFig {
	f := &RefFig{Name: "redis-benchmark PUBLISH", Unit: "PUBLISH/s"}
	bin, err := exec.LookPath("redis-benchmark")
	if err != nil {
		f.Skipped = "redis-benchmark is not installed (Debian: redis-tools)"
		return f
	}
	u, err := url.Parse(r.cfg.RedisBenchURL)
	if err != nil || u.Hostname() == "" {
		f.Skipped = "bad redis URL"
		return f
	}
	port := u.Port()
	if port == "" {
		port = "6379"
	}
	// 50 clients, as many as the fanout's watchers are spread over; the
	// payload is a typical fact's size.
	args := []string{"-h", u.Hostname(), "-p", port, "-n", "100000", "-c", "50", "-q", "--csv",
		"PUBLISH", "ensemble-loadtest-ref", strings.Repeat("x", 200)}
	if pw, ok := u.User.Password(); ok {
		args = append([]string{"-a", pw}, args...)
	}
	f.Command = "redis-benchmark " + strings.Join(redactArgs(args), " ")
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	for _, line := range strings.Split(string(out), "\n") {
		if m := redisCSV.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
			f.Value, _ = strconv.ParseFloat(m[1], 64)
			return f
		}
	}
	f.Skipped = fmt.Sprintf("redis-benchmark found no Redis at %s:%s (%v)", u.Hostname(), port, firstLine(string(out), err))
	return f
}

var errNoPgbench = errors.New("pgbench is not installed (Debian: postgresql-contrib / postgresql-client)")

var tpsRe = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)

func (r *runner) pgbench(ctx context.Context) *RefFig {
	clients := 1
	for _, c := range r.cfg.SubmitConcurrency {
		clients = max(clients, c)
	}
	f := &RefFig{Name: fmt.Sprintf("pgbench -N (%d clients)", clients), Unit: "tx/s"}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	bin, err := r.pgbenchReady(ctx)
	if err != nil {
		f.Skipped = err.Error()
		return f
	}
	secs := max(5, int(min(r.cfg.Duration, 30*time.Second)/time.Second))
	args := []string{"-N", "-c", strconv.Itoa(clients), "-j", "2", "-T", strconv.Itoa(secs), r.cfg.PgbenchURL}
	f.Command = "pgbench " + strings.Join(args[:len(args)-1], " ") + " " + redactURL(r.cfg.PgbenchURL)
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if m := tpsRe.FindStringSubmatch(string(out)); m != nil {
		f.Value, _ = strconv.ParseFloat(m[1], 64)
		return f
	}
	f.Skipped = "pgbench failed: " + firstLine(string(out), err)
	return f
}

// pgbenchReady finds pgbench, creates its database when missing (through
// the maintenance database) and its tables, and returns pgbench's path.
func (r *runner) pgbenchReady(ctx context.Context) (string, error) {
	bin, err := exec.LookPath("pgbench")
	if err != nil {
		return "", errNoPgbench
	}
	u, err := url.Parse(r.cfg.PgbenchURL)
	if err != nil {
		return "", errors.New("bad pgbench URL")
	}
	if psql, err := exec.LookPath("psql"); err == nil {
		db := strings.TrimPrefix(u.Path, "/")
		admin := *u
		admin.Path = "/postgres"
		out, err := exec.CommandContext(ctx, psql, admin.String(), "-tAc",
			"SELECT 1 FROM pg_database WHERE datname = '"+strings.ReplaceAll(db, "'", "''")+"'").CombinedOutput()
		if err == nil && strings.TrimSpace(string(out)) != "1" {
			_ = exec.CommandContext(ctx, psql, admin.String(), "-c", `CREATE DATABASE "`+strings.ReplaceAll(db, `"`, `""`)+`"`).Run()
		}
	}
	if out, err := exec.CommandContext(ctx, bin, "-i", "-s", "1", "-q", r.cfg.PgbenchURL).CombinedOutput(); err != nil {
		return "", errors.New("pgbench -i failed: " + firstLine(string(out), err))
	}
	return bin, nil
}

// commitFloor runs pgbench -N at tps transactions per second over clients
// connections for d and returns each transaction's latency, schedule lag
// included (a transaction late for its slot counts as late, as a chunk
// does): what one small durable PostgreSQL commit costs at that rate on
// this machine. It returns the command it ran, or why it did not run.
func (r *runner) commitFloor(ctx context.Context, clients int, tps float64, d time.Duration) (*Latency, string, error) {
	ctx, cancel := context.WithTimeout(ctx, d+2*time.Minute)
	defer cancel()
	bin, err := r.pgbenchReady(ctx)
	if err != nil {
		return nil, "", err
	}
	dir, err := os.MkdirTemp("", "ensemble-pgbench-")
	if err != nil {
		return nil, "", err
	}
	defer os.RemoveAll(dir)
	args := []string{"-n", "-N", "-c", strconv.Itoa(clients), "-j", strconv.Itoa(min(clients, 2)),
		"-R", strconv.FormatFloat(tps, 'f', 0, 64), "-T", strconv.Itoa(max(1, int(d/time.Second))),
		"-l", "--log-prefix", filepath.Join(dir, "log"), r.cfg.PgbenchURL}
	cmd := "pgbench " + strings.Join(args[:len(args)-3], " ") + " " + redactURL(r.cfg.PgbenchURL)
	if out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput(); err != nil {
		return nil, cmd, errors.New("pgbench failed: " + firstLine(string(out), err))
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "log.*"))
	lat := NewLatency()
	for _, name := range logs {
		f, err := os.Open(name)
		if err != nil {
			return nil, cmd, err
		}
		err = readPgbenchLog(f, lat)
		f.Close()
		if err != nil {
			return nil, cmd, err
		}
	}
	if lat.Count() == 0 {
		return nil, cmd, errors.New("pgbench logged no transaction")
	}
	return lat, cmd, nil
}

// readPgbenchLog records the latency of each transaction of a pgbench -l
// log: "client_id transaction_no time script_no time_epoch time_us
// [schedule_lag]", time in microseconds. Skipped transactions (time
// "skipped", with --latency-limit) are not latencies.
func readPgbenchLog(r io.Reader, lat *Latency) error {
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) < 6 {
			return fmt.Errorf("pgbench log line %d: %d fields, want at least 6", n, len(f))
		}
		if f[2] == "skipped" || f[2] == "failed" {
			continue
		}
		us, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			return fmt.Errorf("pgbench log line %d: time %q: %w", n, f[2], err)
		}
		lat.Record(time.Duration(us) * time.Microsecond)
	}
	return sc.Err()
}

func firstLine(s string, err error) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if s == "" && err != nil {
		return err.Error()
	}
	return s
}

func redactArgs(args []string) []string {
	out := append([]string(nil), args...)
	for i := range out {
		if out[i] == "-a" && i+1 < len(out) {
			out[i+1] = "…"
		}
	}
	for i, a := range out {
		if len(a) > 40 {
			out[i] = fmt.Sprintf("<%d-byte payload>", len(a))
		}
	}
	return out
}

// redactURL drops the password of a URL before it is shown.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "…")
	}
	return u.String()
}
