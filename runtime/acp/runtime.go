// Package acp implements host.Runtime over the Agent Client Protocol: one
// agent connection (usually a child process speaking ACP on stdio) serves
// every live session of the runtime.
//
// The adapter owns the provider Turn identity. ACP has no provider turn id,
// so each prompt's identity is Ensemble's own correlation id
// "ensemble:<provider session id>:<messageId>", where messageId is the one
// this adapter put in the exact session/prompt request (a UUIDv5 of the
// workspace and ClientSubmitID). Acceptance means: the request was written
// to the agent, and the agent either reported progress for that session or
// did not refuse it within the rejection window. Output for a prompt is held
// until the Host's acceptance barrier (TurnSink.Accepted) has returned.
//
// Dispatch errors: *host.ProviderError when the agent answered the prompt
// with a JSON-RPC error before doing any work; *host.LocalError when this
// adapter refused it before writing anything (codes session_busy,
// session_not_started, provider_session_mismatch), which the Host treats
// as "not sent, retry"; any other error leaves the delivery outcome
// unknown (connection lost, caller gave up, Accepted failed).
//
// A provider session takes one prompt at a time. Its fence is released
// only after the Turn's terminal was recorded (transient sink failures are
// retried), and a Dispatch arriving in between waits for it.
package acp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/ensemble-dev/ensemble/host"
)

// Dialer opens a transport to an agent: reads return what the agent writes
// (its stdout), writes go to its input (its stdin). Close stops the agent
// and returns once it is gone. It is the in-process alternative to Command.
type Dialer func(ctx context.Context) (io.ReadWriteCloser, error)

// Config configures a Runtime. Exactly one of Command and Dial is needed.
type Config struct {
	// Name labels the agent for display (host.AgentInfo.Name).
	Name string
	// Simulated marks the built-in sim agent.
	Simulated bool
	// Command is the agent command line, started with os/exec.
	Command []string
	// Dial replaces Command, for agents served in-process (the sim).
	Dial Dialer
	// Cwd is the working directory of the agent process and the default cwd
	// of its sessions (ACP requires an absolute path). Default: the
	// process's working directory. A session may override it with the
	// "cwd" setting.
	Cwd string
	// SessionCwd, when set, is the default cwd of sessions instead of Cwd
	// (the agent process still starts in Cwd): the server's workspace root.
	SessionCwd string
	// Logger receives diagnostics and the agent's stderr. Default: slog.Default().
	Logger *slog.Logger
	// RejectionWindow is how long Dispatch waits, once the prompt is
	// written, for the agent's first sign of work on it (an update or the
	// response) before binding the provider identity anyway. An error
	// response inside the window is an explicit rejection. Default 2s;
	// negative: do not wait.
	RejectionWindow time.Duration
	// StopGrace is how long a stopped agent process gets between SIGTERM
	// and SIGKILL. Default 3s.
	StopGrace time.Duration
}

// Runtime is a host.Runtime over one ACP agent connection at a time.
type Runtime struct {
	cfg Config
	log *slog.Logger

	// base scopes post-acceptance work (output pumping, prompts); it is
	// cancelled only when Shutdown runs out of time.
	base     context.Context
	stopBase context.CancelFunc
	// wg owns every goroutine the runtime starts: connection watchers,
	// prompt calls and turn drivers.
	wg sync.WaitGroup

	keys keyLocks
	// delivered remembers answers already written, by operation id.
	delivered deliveredSet

	mu      sync.Mutex
	info    *acpsdk.Implementation    // what the agent said about itself at initialize
	caps    *acpsdk.AgentCapabilities // what it advertised at its latest initialize
	conn    *connection               // current connection; nil before the first Start or after it died
	dialing chan struct{}             // closed when an in-progress dial ends
	closed  bool
}

var (
	_ host.Runtime              = (*Runtime)(nil)
	_ host.InteractionResponder = (*Runtime)(nil)
)

// ErrShutdown is returned by calls made after Shutdown.
var ErrShutdown = errors.New("acp runtime: shut down")

// New returns a runtime; the agent starts on the first Start.
func New(cfg Config) *Runtime {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.RejectionWindow == 0 {
		cfg.RejectionWindow = 2 * time.Second
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = 3 * time.Second
	}
	if cfg.Name == "" {
		cfg.Name = "ACP agent"
		if len(cfg.Command) > 0 {
			cfg.Name = filepath.Base(cfg.Command[0])
		}
	}
	base, stop := context.WithCancel(context.Background())
	return &Runtime{
		cfg:      cfg,
		log:      cfg.Logger.With("component", "runtime/acp", "agent", cfg.Name),
		base:     base,
		stopBase: stop,
	}
}

// Describe names the agent: as configured until it has introduced itself
// (ACP initialize agentInfo), then by its own name and version.
func (r *Runtime) Describe() host.AgentInfo {
	a := host.AgentInfo{Name: r.cfg.Name, Simulated: r.cfg.Simulated}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.info != nil {
		// Name, not the longer Title: the GUI shows "simulated" itself.
		if r.info.Name != "" {
			a.Name = r.info.Name
		}
		a.Version = r.info.Version
	}
	return a
}

// Start ensures a live provider session for (workspace, session): the live
// one if any, else session/load of req.ProviderSessionID when the agent
// supports it, else session/new.
func (r *Runtime) Start(ctx context.Context, req host.StartRequest) (host.StartResult, error) {
	key := sessionKey{ws: req.WorkspaceID, id: req.SessionID}
	defer r.keys.lock(key)()

	c, err := r.connect(ctx)
	if err != nil {
		return host.StartResult{}, err
	}
	if psid, ok := c.sessionFor(key); ok {
		return host.StartResult{
			ProviderSessionID: psid,
			Created:           false,
			Resumed:           req.ProviderSessionID != "" && req.ProviderSessionID == psid,
		}, nil
	}
	cwd, err := r.sessionCwd(req.Settings)
	if err != nil {
		return host.StartResult{}, err
	}

	if req.ProviderSessionID != "" && c.caps.LoadSession {
		psid := req.ProviderSessionID
		if err := c.waitReleased(ctx, psid); err != nil {
			return host.StartResult{}, err
		}
		if c.psidBound(psid) {
			return host.StartResult{}, fmt.Errorf("acp: provider session %s is live for another session or still running a prompt", psid)
		}
		_, err := c.cs.LoadSession(ctx, loadRequest(psid, cwd))
		switch {
		case err == nil:
			c.bindSession(key, psid)
			return host.StartResult{ProviderSessionID: psid, Created: true, Resumed: true}, nil
		case c.isDead():
			return host.StartResult{}, fmt.Errorf("acp: agent connection lost during session/load: %w", err)
		case ctx.Err() != nil:
			return host.StartResult{}, ctx.Err()
		}
		// The agent could not load it (unknown, expired …): never start
		// over silently; the Host marks the session and lets a member
		// choose a fresh agent session.
		r.log.Info("session/load failed; the session's agent context is lost", "providerSession", psid, "err", err)
		return host.StartResult{}, fmt.Errorf("acp: session/load %s: %w: %v", psid, host.ErrContextLost, err)
	}

	resp, err := c.cs.NewSession(ctx, newRequest(cwd))
	if err != nil {
		return host.StartResult{}, fmt.Errorf("acp: session/new: %w", err)
	}
	psid := string(resp.SessionId)
	c.bindSession(key, psid)
	return host.StartResult{ProviderSessionID: psid, Created: true, Resumed: false}, nil
}

// Live reports the provider session bound to (workspace, session) on the
// current agent connection, if any.
func (r *Runtime) Live(ws, sessionID string) (string, bool) {
	c := r.current()
	if c == nil || c.isDead() {
		return "", false
	}
	return c.sessionFor(sessionKey{ws: ws, id: sessionID})
}

// Cancel sends session/cancel when the Turn is in flight on the live
// connection. ACP cancel is a notification: Confirmed means it was written.
func (r *Runtime) Cancel(ctx context.Context, ref host.TurnRef) (host.CancelReport, error) {
	c := r.current()
	if c == nil {
		return host.CancelReport{}, nil
	}
	t := c.turnByRef(ref)
	if t == nil || t.isFinished() {
		return host.CancelReport{}, nil
	}
	err := c.cancelPrompt(ctx, t.psid)
	// ACP: after session/cancel the client answers every pending
	// permission request of the prompt "cancelled".
	t.cancelWaiters()
	if err != nil {
		return host.CancelReport{}, fmt.Errorf("acp: session/cancel: %w", err)
	}
	// Written is not received: an agent may drop a cancel it reads before
	// its prompt handler registered the prompt (cancelUntilDone), and the
	// Host stops asking once this is confirmed. So it is repeated until
	// the prompt is over.
	t.cancelOnce.Do(func() { r.goOwned(func() { c.cancelUntilDone(t) }) })
	return host.CancelReport{Confirmed: true}, nil
}

// goOwned runs f in a goroutine Shutdown waits for, unless Shutdown has
// begun (the closed check and the Add under one lock, as for a dial).
func (r *Runtime) goOwned(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		f()
	}()
}

// Release forgets the live provider session here. A prompt still running
// in it is cancelled; the agent keeps the session, so the replica that
// owns the session now can load it.
func (r *Runtime) Release(ctx context.Context, ws, sessionID string) error {
	return r.unbind(ctx, ws, sessionID, false)
}

// Destroy is Release plus session/close, sent only when the agent
// advertises it: the provider session is ended for good.
func (r *Runtime) Destroy(ctx context.Context, ws, sessionID string) error {
	return r.unbind(ctx, ws, sessionID, true)
}

func (r *Runtime) unbind(ctx context.Context, ws, sessionID string, destroy bool) error {
	key := sessionKey{ws: ws, id: sessionID}
	defer r.keys.lock(key)()
	c := r.current()
	if c == nil {
		return nil
	}
	psid, ok := c.unbindSession(key)
	if !ok {
		return nil
	}
	if t := c.turnByPSID(psid); t != nil && !t.isFinished() {
		if err := c.cancelPrompt(ctx, psid); err != nil {
			r.log.Warn("session/cancel on release failed", "providerSession", psid, "err", err)
		}
		t.cancelWaiters()
	}
	if destroy && c.caps.SessionCapabilities.Close != nil {
		if _, err := c.cs.CloseSession(ctx, closeRequest(psid)); err != nil {
			return fmt.Errorf("acp: session/close: %w", err)
		}
	}
	return nil
}

func (r *Runtime) shuttingDown() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// Shutdown stops the agent (SIGTERM, then kill after StopGrace) and waits
// for every goroutine of the runtime, which first reports StateLost for any
// Turn still running. If ctx ends first, pending sink calls are cancelled.
func (r *Runtime) Shutdown(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	c := r.conn
	r.mu.Unlock()
	if c != nil {
		c.stop()
	}
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
		r.stopBase()
		return nil
	case <-ctx.Done():
		r.stopBase()
		<-done
		return ctx.Err()
	}
}

// current is the live connection, or nil.
func (r *Runtime) current() *connection {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn != nil && r.conn.isDead() {
		return nil
	}
	return r.conn
}

// connect returns the live connection, starting one when there is none.
// Concurrent callers share one dial.
func (r *Runtime) connect(ctx context.Context) (*connection, error) {
	for {
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			return nil, ErrShutdown
		}
		if r.conn != nil && !r.conn.isDead() {
			c := r.conn
			r.mu.Unlock()
			return c, nil
		}
		if wait := r.dialing; wait != nil {
			r.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		dialing := make(chan struct{})
		r.dialing = dialing
		r.mu.Unlock()

		c, err := r.dial(ctx)

		r.mu.Lock()
		r.dialing = nil
		close(dialing)
		closed := r.closed
		if err == nil && !closed {
			r.conn = c
		}
		r.mu.Unlock()
		if err == nil && closed {
			c.stop() // Shutdown ran while we dialed
			return nil, ErrShutdown
		}
		if err != nil && ctx.Err() == nil && !errors.Is(err, ErrShutdown) {
			// The caller sees a failed turn; the operator needs the cause.
			r.log.Error("agent failed to start", "err", err)
		}
		return c, err
	}
}

// forget drops c once it died so the next Start dials a new connection.
func (r *Runtime) forget(c *connection) {
	r.mu.Lock()
	if r.conn == c {
		r.conn = nil
	}
	r.mu.Unlock()
}

func (r *Runtime) sessionCwd(settings map[string]string) (string, error) {
	cwd := settings["cwd"]
	if cwd == "" {
		cwd = r.cfg.SessionCwd
	}
	if cwd == "" {
		cwd = r.cfg.Cwd
	}
	if cwd == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("acp: working directory: %w", err)
		}
		cwd = wd
	}
	abs, err := filepath.Abs(cwd)
	if err != nil {
		return "", fmt.Errorf("acp: cwd %q: %w", cwd, err)
	}
	return abs, nil
}

// sessionKey is a canonical session.
type sessionKey struct{ ws, id string }

// keyLocks serializes Start and Close per canonical session, so concurrent
// Starts never create two provider sessions for one canonical session.
type keyLocks struct {
	mu sync.Mutex
	m  map[sessionKey]*keyLock
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

func (k *keyLocks) lock(key sessionKey) (unlock func()) {
	k.mu.Lock()
	if k.m == nil {
		k.m = make(map[sessionKey]*keyLock)
	}
	l := k.m[key]
	if l == nil {
		l = &keyLock{}
		k.m[key] = l
	}
	l.refs++
	k.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		k.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
}
