package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/hub"
	"github.com/ensemble-dev/ensemble/runtime/acp"
	"github.com/ensemble-dev/ensemble/runtime/sim"
	"github.com/ensemble-dev/ensemble/server"
	"github.com/ensemble-dev/ensemble/web"
)

const serveSummary = `Run the Ensemble server. With no configuration: embedded SQLite in
./ensemble-data, the in-process bus, the built-in sim agent, HTTP on
127.0.0.1:8080, and a printed sign-in link.`

type serveConfig struct {
	addr, dataDir, dbURL, redisURL, agent, replicaID string
	jwtSecret, jwtIssuer, jwtAudience                string
	noMigrate                                        bool
	simRate                                          time.Duration
	simScenario, logLevel, workspace                 string
	shutdownGrace                                    time.Duration
	httpTimeouts                                     server.HTTPTimeouts
	reconnectJitter                                  time.Duration
	pprofAddr                                        string
	workspaceRoot                                    string         // resolved; session working directories stay under it
	sessionLease                                     time.Duration  // cluster mode (cluster.go)
	security                                         securityConfig // tokens, origins, limits (security.go)
	trash                                            trashConfig    // retention (trash.go)
}

func parseServe(args []string, stderr io.Writer) (serveConfig, error) {
	var c serveConfig
	f := newFlags("serve", serveSummary, stderr)
	addr := f.string("addr", "ENSEMBLE_ADDR", "127.0.0.1:8080", "HTTP listen address")
	dataDir := f.string("data-dir", "ENSEMBLE_DATA_DIR", "./ensemble-data", "directory for the embedded SQLite database, the local secret and the built-in sim agent's sessions")
	dbURL := f.string("database-url", "ENSEMBLE_DATABASE_URL", "", "canonical store: empty for embedded SQLite in the data dir, sqlite://PATH, or postgres://… (PostgreSQL)")
	redisURL := f.string("redis-url", "ENSEMBLE_REDIS_URL", "", "Redis URL for cluster mode (empty: single replica with the in-process bus)")
	agent := f.string("agent", "ENSEMBLE_AGENT", "sim", `agent: "sim" for the built-in simulator, or an ACP agent command line (split on whitespace; use a wrapper script for quoting)`)
	replica := f.string("replica-id", "ENSEMBLE_REPLICA_ID", "", "replica name in logs and metrics (default: the host name)")
	secret := f.string("jwt-secret", "ENSEMBLE_JWT_SECRET", "", "shared HS256 secret, at least 32 bytes (default: a local secret generated in the data dir)")
	issuer := f.string("jwt-issuer", "ENSEMBLE_JWT_ISSUER", "", "required token issuer (iss), if set")
	audience := f.string("jwt-audience", "ENSEMBLE_JWT_AUDIENCE", "", "required token audience (aud), if set")
	noMigrate := f.bool("no-migrate", "ENSEMBLE_NO_MIGRATE", false, "refuse to start when migrations are pending instead of applying them")
	rate := f.duration("sim-rate", "ENSEMBLE_SIM_RATE", 0, "sim agent: delay between streamed chunks (default 15ms; negative: none)")
	scenario := f.string("sim-scenario", "ENSEMBLE_SIM_SCENARIO", "", "sim agent: JSON scenario file replacing the default answer")
	level := f.string("log-level", "ENSEMBLE_LOG_LEVEL", "info", "log level: debug, info, warn or error")
	ws := f.string("workspace", "ENSEMBLE_WORKSPACE", "default", "workspace the printed sign-in link grants admin access to")
	grace := f.duration("shutdown-grace", "ENSEMBLE_SHUTDOWN_GRACE", 10*time.Second, "how long a graceful shutdown may take")
	pprofAddr := pprofFlag(f)
	wsRoot := f.string("workspace-root", "ENSEMBLE_WORKSPACE_ROOT", "", "directory every session's working directory (the cwd setting) must lie under, symlinks and .. resolved; also the agent's default cwd (default: DATA-DIR/work)")
	lease := f.duration("session-lease", "ENSEMBLE_SESSION_LEASE", host.DefaultLeaseTTL, "cluster mode: session ownership lease; a dead replica's sessions are taken over after it")
	security := securityFlags(f)
	trash := trashFlags(f)
	dt := server.DefaultHTTPTimeouts()
	readHeader := f.duration("http-read-header-timeout", "ENSEMBLE_HTTP_READ_HEADER_TIMEOUT", dt.ReadHeader, "time to read a request's headers")
	readT := f.duration("http-read-timeout", "ENSEMBLE_HTTP_READ_TIMEOUT", dt.Read, "time to read a whole request, body included (a slower body is answered body_timeout)")
	writeT := f.duration("http-write-timeout", "ENSEMBLE_HTTP_WRITE_TIMEOUT", dt.Write, "time to handle a request and write its response")
	idleT := f.duration("http-idle-timeout", "ENSEMBLE_HTTP_IDLE_TIMEOUT", dt.Idle, "how long an idle keep-alive connection is kept")
	jitter := f.duration("reconnect-jitter", "ENSEMBLE_RECONNECT_JITTER", 5*time.Second, "on shutdown, clients are told to reconnect after a random delay below this")
	if err := f.parse(args); err != nil {
		return c, err
	}
	c = serveConfig{addr: *addr, dataDir: *dataDir, dbURL: *dbURL, redisURL: *redisURL, agent: *agent,
		replicaID: *replica, jwtSecret: *secret, jwtIssuer: *issuer, jwtAudience: *audience,
		noMigrate: *noMigrate, simRate: *rate, simScenario: *scenario, logLevel: *level,
		workspace: *ws, shutdownGrace: *grace}
	c.sessionLease = *lease
	c.httpTimeouts = server.HTTPTimeouts{ReadHeader: *readHeader, Read: *readT, Write: *writeT, Idle: *idleT}
	c.reconnectJitter = *jitter
	var err error
	if c.security, err = security(); err != nil {
		return c, err
	}
	if c.trash, err = trash(); err != nil {
		return c, err
	}
	c.pprofAddr = *pprofAddr
	c.workspaceRoot = *wsRoot
	if c.workspaceRoot == "" {
		c.workspaceRoot = filepath.Join(c.dataDir, "work")
	}
	if c.replicaID == "" {
		c.replicaID, _ = os.Hostname()
	}
	return c, nil
}

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseServe(args, stderr)
	if err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})).With("replica", c.replicaID)
	stopPprof, err := startPprof(c.pprofAddr, log)
	if err != nil {
		return err
	}
	defer stopPprof()

	if err := os.MkdirAll(c.dataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if c.workspaceRoot, err = host.ResolveWorkspaceRoot(c.workspaceRoot); err != nil {
		return fmt.Errorf("--workspace-root: %w", err)
	}
	storeChoice, err := selectStore(c.dbURL, c.dataDir)
	if err != nil {
		return err
	}
	store, err := openStore(ctx, storeChoice, c.noMigrate, log)
	if err != nil {
		return err
	}
	defer store.Close()
	log.Info("canonical store", "store", storeChoice)

	verifier, key, err := newVerifier(ctx, c, log)
	if err != nil {
		return err
	}

	runtime, err := newRuntime(c, log)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), c.shutdownGrace)
		defer cancel()
		_ = runtime.Shutdown(sctx)
	}()

	bus, rb, closeBus, err := openBus(ctx, c, log)
	if err != nil {
		return err
	}
	defer closeBus()
	cl, err := openCluster(ctx, c, rb)
	if err != nil {
		return err
	}
	epoch, clusterCfg := cl.hostConfig()
	h, err := host.Open(host.Config{Store: store, Runtime: runtime, Observer: bus, Logger: log.With("component", "host"),
		ReplicaID: c.replicaID, WorkspaceRoot: c.workspaceRoot, Cluster: clusterCfg, Epoch: epoch})
	if err != nil {
		if cl != nil {
			_ = cl.router.Close()
		}
		return err
	}
	stopCluster := cl.start(ctx, h, log)
	defer stopCluster()
	rep, err := h.Recover(ctx)
	if err != nil {
		return fmt.Errorf("recovery: %w", err)
	}
	log.Info("recovery finished", "settledTurns", len(rep.SettledTurns), "quarantined", len(rep.Quarantined), "epoch", h.Epoch())

	hb := hub.New(hub.Config{Reader: h, Goals: h, Queues: h, Agent: h, Bus: bus, Logger: log.With("component", "hub"),
		Presence: presenceStore(rb), Replica: c.replicaID})
	defer hb.Close()
	srv := server.New(server.Config{Host: h, Hub: hb, Registry: metricsRegistry(rb, h, store), Verifier: verifier, Web: web.FS(), Logger: log.With("component", "server"),
		OriginPatterns: c.security.origins, Limits: c.security.limits, TokenLeeway: c.security.leeway,
		ReconnectJitter: c.reconnectJitter})

	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		return err
	}
	addr := ln.Addr().String()
	signIn, err := signInLine(c, key, addr)
	if err != nil {
		ln.Close()
		return err
	}

	httpSrv := c.httpTimeouts.HTTPServer(srv)
	workers, stopWorkers := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWorkers()
	relayDone := make(chan struct{})
	go func() { defer close(relayDone); _ = h.Run(workers) }()
	retentionDone := runRetention(workers, h, c.trash)
	serveErr := make(chan error, 1)
	go func() { serveErr <- httpSrv.Serve(ln) }()
	fmt.Fprintf(stdout, "Ensemble is listening on http://%s (agent: %s)\n%s\n", addr, describeAgent(h.Agent()), signIn)

	select {
	case err = <-serveErr:
	case <-ctx.Done():
		log.Info("shutting down")
	}
	sctx, cancel := context.WithTimeout(context.Background(), c.shutdownGrace)
	defer cancel()
	// Stop accepting and drain plain HTTP while the WebSockets drain.
	httpDone := make(chan struct{})
	go func() { defer close(httpDone); _ = httpSrv.Shutdown(sctx) }()
	_ = srv.Shutdown(sctx)
	<-httpDone
	stopWorkers()
	<-relayDone
	<-retentionDone
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

func describeAgent(a host.AgentInfo) string {
	if a.Simulated {
		return a.Name + " (simulated)"
	}
	return a.Name
}

// simStateDir is where the built-in sim keeps its sessions: beside the
// embedded store, in the data dir.
func simStateDir(dataDir string) string { return filepath.Join(dataDir, "sim-sessions") }

func newRuntime(c serveConfig, log *slog.Logger) (*acp.Runtime, error) {
	log = log.With("component", "runtime")
	if c.agent == "sim" {
		// Like a real agent, the sim keeps its sessions on disk, so they
		// load after a restart instead of ending on context_lost.
		opts, err := simOptions(c.simRate, c.simScenario, simStateDir(c.dataDir), log)
		if err != nil {
			return nil, err
		}
		return acp.New(acp.Config{Name: sim.Name, Simulated: true, Dial: sim.Dial(opts), Logger: log, SessionCwd: c.workspaceRoot}), nil
	}
	argv := strings.Fields(c.agent)
	if len(argv) == 0 {
		return nil, errors.New("--agent is empty")
	}
	// Say so now, not at the first prompt: the agent starts lazily.
	if _, err := exec.LookPath(argv[0]); err != nil {
		return nil, fmt.Errorf("--agent %q: %w (give a path to an ACP agent binary, or sim)", argv[0], err)
	}
	// The agent process keeps the server's working directory (relative
	// paths in its command line keep their meaning); its sessions default
	// to the workspace root.
	cfg := acp.Config{Command: argv, Logger: log, SessionCwd: c.workspaceRoot}
	if len(argv) > 1 && argv[1] == "sim-agent" {
		// Our own sim agent as a process is still the simulator: label it.
		cfg.Name, cfg.Simulated = sim.Name, true
	}
	return acp.New(cfg), nil
}
