package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/ensemble-dev/ensemble/loadtest"
)

const loadtestSummary = `Drive Ensemble replicas over real WebSocket connections and report latency
(HDR percentiles), throughput and memory, each as a ratio to a reference
measured in the same run (a bare coder/websocket broadcast server,
redis-benchmark PUBLISH, pgbench -N). Targets must be loopback addresses.
Without --target it starts its own replicas (ensemble serve on free loopback
ports, a temporary data dir, --database-url/--redis-url passed through).
Writes report.json, report.md and report.svg to --out and prints the
Markdown. Scenarios: fanout, idle, submit, reconnect, approve, and (not by
default) storm and storm-drain: two replicas of their own on the store and
Redis, one SIGKILLed (storm) or sent SIGTERM (storm-drain) while its clients
move to the other and resume from their durable positions. Clients dial
from 127.0.0.1 … 127.0.0.16 in turn; the open-file limit is raised to the
hard limit.`

// loadtestCmd runs `ensemble loadtest`, or the bare reference server the
// harness spawns (`ensemble loadtest reference-server --addr …`).
func loadtestCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "reference-server" {
		return referenceServer(ctx, args[1:], stdout, stderr)
	}
	d := loadtest.DefaultConfig()
	f := newFlags("loadtest", loadtestSummary, stderr)
	targets := f.String("target", "", "running replicas to drive, comma-separated host:port (loopback only); empty: spawn --replicas")
	replicas := f.Int("replicas", d.Spawn, "replicas to spawn when --target is empty")
	dbURL := f.String("database-url", "", "passed to spawned replicas (empty: one shared embedded SQLite file)")
	redisURL := f.String("redis-url", "", "passed to spawned replicas (cluster mode); also where redis-benchmark runs")
	secret := f.String("jwt-secret", "", "the servers' HS256 secret, for --target (default: the local secret in --data-dir); spawned replicas get a fresh one")
	dataDir := f.String("data-dir", "./ensemble-data", "data dir holding a running server's local secret (with --target)")
	scenarios := f.String("scenarios", strings.Join(d.Scenarios, ","), "scenarios to run, comma-separated")
	duration := f.Duration("duration", d.Duration, "measured time per scenario (submit: per concurrency level)")
	maxTime := f.Duration("max-time", d.MaxTime, "hard limit for the whole run")
	workspaces := f.Int("workspaces", d.Workspaces, "fanout: workspaces")
	watchers := f.Int("watchers", d.Watchers, "fanout: watchers per workspace (spread over the replicas)")
	sessions := f.Int("sessions", d.Sessions, "fanout: streaming sessions per workspace")
	rate := f.Duration("rate", d.Rate, "fanout, reconnect: delay between streamed chunks")
	words := f.Int("words", d.Words, "fanout: words per answer")
	stagger := f.Bool("stagger", false, "fanout: start the sessions' first prompts spread over one answer's streaming time (words × rate) instead of together, so their turns end out of step")
	idleConns := f.Int("idle-conns", d.IdleConns, "idle: connections")
	idleWindow := f.Duration("idle-window", d.IdleWindow, "idle: how long to measure CPU while idle")
	conc := f.String("submit-concurrency", joinInts(d.SubmitConcurrency), "submit: concurrency levels, comma-separated")
	rcClients := f.Int("reconnect-clients", d.ReconnectClients, "reconnect: clients")
	stormClients := f.Int("storm-clients", d.StormClients, "storm, storm-drain: clients, half on each of two replicas the scenario spawns (needs --redis-url; --database-url for PostgreSQL)")
	stormSessions := f.Int("storm-sessions", d.StormSessions, "storm, storm-drain: sessions streaming throughout")
	stormShare := f.Float64("storm-streaming-share", d.StormStreamingShare, "storm, storm-drain: fraction of the clients (0 < F ≤ 1) watching the streaming sessions; the rest watch --storm-idle-sessions quiet sessions of the same workspace")
	stormIdle := f.Int("storm-idle-sessions", d.StormIdleSessions, "storm, storm-drain: quiet sessions (one short turn of history) the clients beyond --storm-streaming-share watch")
	stormMaxSubs := f.Int("storm-max-subscribes", 0, "storm, storm-drain: the replicas' --max-subscribes (0: their default)")
	stormPendingHello := f.Int("storm-max-pending-hello", 0, "storm, storm-drain: the replicas' --max-pending-hello (0: their default; negative: unlimited)")
	base := f.Duration("backoff-base", d.BackoffBase, "reconnect: full-jitter backoff base")
	backoffCap := f.Duration("backoff-cap", d.BackoffCap, "reconnect: full-jitter backoff cap")
	noRefs := f.Bool("no-references", false, "skip every reference measurement")
	noExternal := f.Bool("no-external", false, "skip only the redis-benchmark and pgbench throughput references (keep the bare broadcast server and the fanout's commit floor)")
	noFloor := f.Bool("no-commit-floor", false, "fanout on PostgreSQL: skip the pgbench commit floor (it loads the same server; set it when measuring that server's CPU over the run)")
	pgbenchURL := f.String("pgbench-url", d.PgbenchURL, "database for the pgbench -N reference (created and initialised when missing)")
	profiles := f.String("profile-dir", "", "with spawned replicas: save a CPU profile of replica 1 during fanout and a heap profile after idle (needs --pprof-addr support)")
	out := f.String("out", "loadtest-report", "directory for report.json, report.md and report.svg")
	quiet := f.Bool("quiet", false, "no progress line")
	if err := f.parse(args); err != nil {
		return err
	}
	cfg := loadtest.Config{Spawn: *replicas, DatabaseURL: *dbURL, RedisURL: *redisURL, Duration: *duration, MaxTime: *maxTime,
		Workspaces: *workspaces, Watchers: *watchers, Sessions: *sessions, Rate: *rate, Words: *words, Stagger: *stagger,
		IdleConns: *idleConns, IdleWindow: *idleWindow, ReconnectClients: *rcClients, StormClients: *stormClients, StormSessions: *stormSessions, StormIdleSessions: *stormIdle, BackoffBase: *base, BackoffCap: *backoffCap,
		NoReferences: *noRefs, NoExternal: *noExternal, NoCommitFloor: *noFloor, PgbenchURL: *pgbenchURL, ProfileDir: *profiles,
		Command: "ensemble loadtest " + strings.Join(args, " ")}
	if *stormShare <= 0 || *stormShare > 1 {
		return fmt.Errorf("--storm-streaming-share %g: want a fraction in (0, 1]", *stormShare)
	}
	cfg.StormStreamingShare = *stormShare
	if *stormMaxSubs != 0 {
		cfg.StormExtra = append(cfg.StormExtra, "--max-subscribes", strconv.Itoa(*stormMaxSubs))
	}
	if *stormPendingHello != 0 {
		cfg.StormExtra = append(cfg.StormExtra, "--max-pending-hello", strconv.Itoa(*stormPendingHello))
	}
	for _, s := range strings.Split(*scenarios, ",") {
		if s = strings.TrimSpace(s); s != "" {
			cfg.Scenarios = append(cfg.Scenarios, s)
		}
	}
	for _, s := range strings.Split(*conc, ",") {
		if s = strings.TrimSpace(s); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil {
				return fmt.Errorf("--submit-concurrency: %q is not a number", s)
			}
			cfg.SubmitConcurrency = append(cfg.SubmitConcurrency, n)
		}
	}
	for _, t := range strings.Split(*targets, ",") {
		if t = strings.TrimSpace(t); t != "" {
			if err := loadtest.CheckLoopback(t); err != nil {
				return err
			}
			cfg.Targets = append(cfg.Targets, t)
		}
	}
	if len(cfg.Targets) > 0 {
		if *secret == "" {
			if _, err := os.Stat(*dataDir); err != nil {
				return fmt.Errorf("--target needs the servers' secret: pass --jwt-secret or the server's --data-dir (%v)", err)
			}
		}
		key, err := signingSecret(*secret, *dataDir, false)
		if err != nil {
			return err
		}
		cfg.Secret = key
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cfg.Binary = exe
	if !*quiet {
		cfg.Progress = stderr
	}
	rep, err := loadtest.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if err := rep.Write(*out); err != nil {
		return err
	}
	fmt.Fprint(stdout, rep.Markdown())
	fmt.Fprintf(stdout, "\nWrote %s/report.json, report.md and report.svg\n", *out)
	if !rep.OK() {
		return errors.New("an invariant check failed (see the report)")
	}
	return nil
}

// referenceServer serves the bare broadcast server until interrupted.
func referenceServer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("loadtest reference-server", "Serve the bare coder/websocket broadcast server the load test compares against.", stderr)
	addr := f.String("addr", "127.0.0.1:0", "listen address (loopback only)")
	if err := f.parse(args); err != nil {
		return err
	}
	if err := loadtest.CheckLoopback(*addr); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "reference server listening on %s\n", ln.Addr())
	if f, ok := stdout.(*os.File); ok {
		_ = f.Sync()
	}
	return loadtest.ServeReference(ctx, ln)
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}
