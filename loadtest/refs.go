package loadtest

import (
	"context"
	"fmt"
	"net/url"
	"os/exec"
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

var tpsRe = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)

func (r *runner) pgbench(ctx context.Context) *RefFig {
	clients := 1
	for _, c := range r.cfg.SubmitConcurrency {
		clients = max(clients, c)
	}
	f := &RefFig{Name: fmt.Sprintf("pgbench -N (%d clients)", clients), Unit: "tx/s"}
	bin, err := exec.LookPath("pgbench")
	if err != nil {
		f.Skipped = "pgbench is not installed (Debian: postgresql-contrib / postgresql-client)"
		return f
	}
	u, err := url.Parse(r.cfg.PgbenchURL)
	if err != nil {
		f.Skipped = "bad pgbench URL"
		return f
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	// Create the database when missing (through the maintenance database).
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
		f.Skipped = "pgbench -i failed: " + firstLine(string(out), err)
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
