package loadtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ensemble-dev/ensemble/auth"
)

// Config is one load test run. Zero values take the defaults of
// DefaultConfig.
type Config struct {
	// Binary is the ensemble executable, used to spawn replicas and the
	// reference server (empty: the reference runs in this process and
	// replicas cannot be spawned).
	Binary string
	// Targets are running replicas (host:port, loopback only). Empty: spawn
	// Spawn replicas.
	Targets []string
	Spawn   int
	// DatabaseURL and RedisURL are passed to spawned replicas.
	DatabaseURL, RedisURL string
	// Secret signs the harness's tokens (spawned replicas get it too).
	Secret []byte
	// Scenarios to run, in order: fanout, idle, submit, reconnect, approve.
	Scenarios []string
	// Duration is each scenario's measured time (submit: per level).
	Duration time.Duration
	// MaxTime bounds the whole run.
	MaxTime time.Duration

	Workspaces int           // fanout: workspaces
	Watchers   int           // fanout: watchers per workspace
	Sessions   int           // fanout: streaming sessions per workspace
	Rate       time.Duration // fanout, reconnect: delay between streamed chunks
	Words      int           // fanout, reconnect: words per answer
	// Stagger (fanout) spreads the sessions' first prompts evenly over one
	// answer's streaming time, so their turns start and end out of step;
	// by default they all start together and, their answers being equally
	// long, every session's Turn boundary falls in the same few
	// milliseconds, ten times a run.
	Stagger bool

	IdleConns  int           // idle: connections
	IdleWindow time.Duration // idle: CPU measuring window

	SubmitConcurrency []int // submit: levels

	ReconnectClients int
	// StormClients are the storm scenarios' clients (half on each of two
	// replicas), StormSessions the sessions streaming meanwhile, StormExtra
	// extra `ensemble serve` flags for the storm's two replicas.
	StormClients  int
	StormSessions int
	StormExtra    []string
	// StormStreamingShare is the fraction of the storm's clients that watch
	// the streaming sessions (0: 1, every client); the rest watch
	// StormIdleSessions sessions of the same workspace that have a short
	// history and then stay quiet, as most browser tabs do.
	StormStreamingShare float64
	StormIdleSessions   int
	BackoffBase         time.Duration
	BackoffCap          time.Duration

	// NoReferences skips every reference; NoExternal only the throughput
	// references run before the scenarios (redis-benchmark, pgbench -N),
	// not the ones measured at a scenario's own shape (the bare server,
	// the fanout's durable commit floor).
	NoReferences, NoExternal bool
	// NoCommitFloor skips the fanout's commit floor alone: pgbench loads
	// the PostgreSQL the replicas use, which a caller measuring that
	// server's CPU over the run must not count.
	NoCommitFloor bool
	// RedisBenchURL is where redis-benchmark runs (default RedisURL or
	// redis://127.0.0.1:6379). PgbenchURL is the database pgbench uses
	// (created and initialised when missing).
	RedisBenchURL, PgbenchURL string
	// ProfileDir, when set with spawned replicas, receives a CPU profile of
	// replica 1 taken during fanout and a heap profile after idle.
	ProfileDir string

	Progress io.Writer // progress line (nil: none)
	Command  string    // recorded in the report
}

// DefaultConfig is a run that fits a 2-core machine in a few minutes.
func DefaultConfig() Config {
	return Config{
		Spawn: 1, Scenarios: []string{"fanout", "idle", "submit", "reconnect", "approve"},
		Duration: 15 * time.Second, MaxTime: 20 * time.Minute,
		Workspaces: 4, Watchers: 25, Sessions: 2, Rate: 15 * time.Millisecond, Words: 100,
		IdleConns: 2000, IdleWindow: 10 * time.Second,
		SubmitConcurrency: []int{1, 4, 16},
		ReconnectClients:  2000, StormClients: 2000, StormSessions: 10, StormStreamingShare: 1, StormIdleSessions: 10, BackoffBase: 100 * time.Millisecond, BackoffCap: 5 * time.Second,
		RedisBenchURL: "redis://127.0.0.1:6379", PgbenchURL: "postgres://postgres@127.0.0.1:5432/ensemble_pgbench?sslmode=disable",
	}
}

// Limits keep every run within one small machine.
const (
	maxConns    = 20000
	maxReplicas = 8
)

func (c *Config) fill() error {
	d := DefaultConfig()
	if len(c.Scenarios) == 0 {
		c.Scenarios = d.Scenarios
	}
	setDur := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	setInt := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	setDur(&c.Duration, d.Duration)
	setDur(&c.MaxTime, d.MaxTime)
	setDur(&c.Rate, d.Rate)
	setDur(&c.IdleWindow, d.IdleWindow)
	setDur(&c.BackoffBase, d.BackoffBase)
	setDur(&c.BackoffCap, d.BackoffCap)
	setInt(&c.Spawn, d.Spawn)
	setInt(&c.Workspaces, d.Workspaces)
	setInt(&c.Watchers, d.Watchers)
	setInt(&c.Sessions, d.Sessions)
	setInt(&c.Words, d.Words)
	setInt(&c.IdleConns, d.IdleConns)
	setInt(&c.ReconnectClients, d.ReconnectClients)
	setInt(&c.StormClients, d.StormClients)
	setInt(&c.StormSessions, d.StormSessions)
	setInt(&c.StormIdleSessions, d.StormIdleSessions)
	if c.StormStreamingShare == 0 {
		c.StormStreamingShare = d.StormStreamingShare
	}
	if len(c.SubmitConcurrency) == 0 {
		c.SubmitConcurrency = d.SubmitConcurrency
	}
	if c.RedisBenchURL == "" {
		c.RedisBenchURL = d.RedisBenchURL
		if c.RedisURL != "" {
			c.RedisBenchURL = c.RedisURL
		}
	}
	if c.PgbenchURL == "" {
		c.PgbenchURL = d.PgbenchURL
	}
	for _, s := range c.Scenarios {
		switch s {
		case "fanout", "idle", "submit", "reconnect", "approve", "storm", "storm-drain":
		default:
			return fmt.Errorf("unknown scenario %q (want fanout, idle, submit, reconnect, approve, storm, storm-drain)", s)
		}
	}
	if c.Duration > 10*time.Minute || c.MaxTime > 2*time.Hour {
		return errors.New("--duration is capped at 10m and --max-time at 2h")
	}
	if n := c.Workspaces * (c.Watchers + c.Sessions); n > maxConns {
		return fmt.Errorf("fanout wants %d connections; the cap is %d", n, maxConns)
	}
	if c.IdleConns > maxConns || c.ReconnectClients > maxConns || c.StormClients > maxConns {
		return fmt.Errorf("at most %d connections per scenario", maxConns)
	}
	if c.StormStreamingShare < 0 || c.StormStreamingShare > 1 {
		return fmt.Errorf("storm streaming share %g: want a fraction in (0, 1]", c.StormStreamingShare)
	}
	for _, n := range c.SubmitConcurrency {
		if n <= 0 || n > 256 {
			return fmt.Errorf("submit concurrency %d: want 1..256", n)
		}
	}
	if c.Spawn > maxReplicas || len(c.Targets) > maxReplicas {
		return fmt.Errorf("at most %d replicas", maxReplicas)
	}
	for _, t := range c.Targets {
		if err := CheckLoopback(t); err != nil {
			return err
		}
	}
	for _, u := range []string{c.DatabaseURL, c.RedisURL, c.RedisBenchURL, c.PgbenchURL} {
		if u != "" && !strings.HasPrefix(u, "sqlite://") {
			if err := CheckLoopback(u); err != nil {
				return err
			}
		}
	}
	if len(c.Targets) == 0 && c.Binary == "" {
		return errors.New("no targets and no ensemble binary to spawn replicas with")
	}
	if len(c.Targets) > 0 && len(c.Secret) == 0 {
		return errors.New("running targets need the server's JWT secret (--jwt-secret or --data-dir)")
	}
	return nil
}

// runner holds one run's shared state.
type runner struct {
	cfg      Config
	addrs    []string
	replicas []*Replica
	ref      *RefServer
	rep      *Report
	id       string // short run id, in workspace names
	progress *progress
	refs     map[string]*RefFig
}

// Run executes the configured scenarios and returns the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.MaxTime)
	defer cancel()
	var idb [3]byte
	_, _ = rand.Read(idb[:])
	r := &runner{cfg: cfg, rep: newReport(), id: hex.EncodeToString(idb[:]), refs: map[string]*RefFig{}}
	r.rep.Command = cfg.Command
	r.progress = newProgress(cfg.Progress)
	defer r.progress.stop()

	if len(r.cfg.Secret) == 0 {
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		r.cfg.Secret = []byte(hex.EncodeToString(b))
	}
	if lim, err := raiseNoFile(); err == nil {
		r.rep.Notes = append(r.rep.Notes, fmt.Sprintf("open-file limit of the harness (and the replicas it spawns): %d (raised to the hard limit)", lim))
	} else {
		r.rep.Notes = append(r.rep.Notes, "open-file limit not raised: "+err.Error())
	}
	if len(cfg.Targets) > 0 {
		r.addrs = cfg.Targets
	} else if onlyStorms(cfg.Scenarios) {
		// The storm scenarios spawn two replicas of their own.
	} else {
		dir, err := os.MkdirTemp("", "ensemble-loadtest-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		r.progress.set(func() string { return fmt.Sprintf("starting %d replica(s)", cfg.Spawn) })
		reps, err := Spawn(ctx, SpawnOptions{Binary: cfg.Binary, Replicas: cfg.Spawn, Secret: string(r.cfg.Secret),
			DatabaseURL: cfg.DatabaseURL, RedisURL: cfg.RedisURL, DataDir: dir, PprofAddrs: cfg.ProfileDir != ""})
		if err != nil {
			return nil, err
		}
		defer StopAll(reps)
		r.replicas = reps
		for _, x := range reps {
			r.addrs = append(r.addrs, x.Addr)
		}
	}
	spawned := len(r.replicas) > 0 || (len(cfg.Targets) == 0 && onlyStorms(cfg.Scenarios))
	r.rep.Setup = Setup{Replicas: len(r.addrs), Targets: r.addrs, Spawned: spawned,
		Store: storeName(cfg.DatabaseURL, spawned), Bus: busName(cfg.RedisURL, spawned)}
	if len(r.replicas) == 0 && spawned {
		r.rep.Setup.Replicas = 2 // the storm's own
	}

	if !cfg.NoReferences && !cfg.NoExternal {
		r.externalReferences(ctx)
	}
	if !cfg.NoReferences {
		ref, err := StartReference(ctx, cfg.Binary)
		if err != nil {
			r.rep.Notes = append(r.rep.Notes, "reference server did not start: "+err.Error())
		} else {
			defer ref.Stop()
			r.ref = ref
		}
	}
	for _, name := range cfg.Scenarios {
		if ctx.Err() != nil {
			r.rep.Scenarios = append(r.rep.Scenarios, &Result{Name: name, Skipped: "the run's --max-time was reached"})
			continue
		}
		var res *Result
		switch name {
		case "fanout":
			res = r.fanout(ctx)
		case "idle":
			res = r.idle(ctx)
		case "submit":
			res = r.submit(ctx)
		case "reconnect":
			res = r.reconnect(ctx)
		case "approve":
			res = r.approve(ctx)
		case "storm":
			res = r.storm(ctx, false)
		case "storm-drain":
			res = r.storm(ctx, true)
		}
		r.rep.Scenarios = append(r.rep.Scenarios, res)
	}
	r.rep.Finished = time.Now().UTC()
	r.rep.Machine.LoadAvgEnd = loadAvg()
	return r.rep, nil
}

func onlyStorms(names []string) bool {
	for _, n := range names {
		if n != "storm" && n != "storm-drain" {
			return false
		}
	}
	return true
}

func storeName(dbURL string, spawned bool) string {
	switch {
	case strings.HasPrefix(dbURL, "postgres"):
		return "PostgreSQL"
	case dbURL == "" && !spawned:
		return "as configured"
	}
	return "SQLite"
}

func busName(redisURL string, spawned bool) string {
	switch {
	case redisURL != "":
		return "Redis"
	case !spawned:
		return "as configured"
	}
	return "in-process"
}

// token mints a token for sub with role in the workspaces.
func (r *runner) token(sub string, role auth.Role, workspaces ...string) string {
	ws := map[string]auth.Role{}
	for _, w := range workspaces {
		ws[w] = role
	}
	tok, err := auth.Mint(r.cfg.Secret, auth.Claims{Sub: sub, Name: sub, Workspaces: ws, TTL: 2 * time.Hour})
	if err != nil {
		panic(err) // only on an empty secret, which fill rules out
	}
	return tok
}

func (r *runner) workspace(kind string, i int) string {
	return fmt.Sprintf("lt-%s-%s%d", r.id, kind, i)
}

// addr is replica i's address (round robin).
func (r *runner) addr(i int) string { return r.addrs[i%len(r.addrs)] }

// dialMany opens n clients with bounded concurrency; dial(i) opens one.
func dialMany[T any](ctx context.Context, n, parallel int, made *atomic.Int64, dial func(ctx context.Context, i int) (T, error)) ([]T, error) {
	out := make([]T, n)
	errs := make([]error, n)
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		if ctx.Err() != nil {
			<-sem
			errs[i] = ctx.Err()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			out[i], errs[i] = dial(ctx, i)
			if errs[i] == nil && made != nil {
				made.Add(1)
			}
		}()
	}
	wg.Wait()
	return out, errors.Join(firstErrors(errs, 3)...)
}

func firstErrors(errs []error, n int) []error {
	var out []error
	count := 0
	for _, e := range errs {
		if e != nil {
			count++
			if len(out) < n {
				out = append(out, e)
			}
		}
	}
	if count > n {
		out = append(out, fmt.Errorf("… and %d more errors", count-n))
	}
	return out
}
