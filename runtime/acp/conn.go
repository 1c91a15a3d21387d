package acp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/runtime/internal/gate"
)

// connection is one initialized ACP client connection to an agent, with the
// provider sessions and prompts live on it. It dies with its transport and
// is never reused afterwards.
type connection struct {
	rt    *Runtime
	nonce string // makes provider turn ids unique across connections
	rwc   io.ReadWriteCloser
	out   *watchWriter
	cs    *acpsdk.ClientSideConnection
	caps  acpsdk.AgentCapabilities
	dead  <-chan struct{}

	stopOnce sync.Once

	mu       sync.Mutex
	sessions map[sessionKey]string // canonical → provider session id
	bound    map[string]sessionKey // provider session id → canonical
	byPSID   map[string]*turn      // prompt in flight per provider session
	byRef    map[host.TurnRef]*turn
	// children routes a sub-agent's provider session to the Turn running
	// it; childAdded is closed (and replaced) whenever one is added.
	children   map[string]*turn
	childAdded chan struct{}
	// waiters are the reported permission requests still open.
	waiters map[host.InteractionRef]*waiter
}

// dial starts the agent, runs initialize and starts the watcher that
// forgets the connection when it dies.
func (r *Runtime) dial(ctx context.Context) (*connection, error) {
	var (
		rwc io.ReadWriteCloser
		err error
	)
	switch {
	case r.cfg.Dial != nil:
		rwc, err = r.cfg.Dial(ctx)
	case len(r.cfg.Command) > 0:
		rwc, err = startProcess(r.cfg.Command, r.cfg.Cwd, r.cfg.StopGrace, r.log)
	default:
		err = errors.New("no agent Command or Dial configured")
	}
	if err != nil {
		return nil, fmt.Errorf("acp: start agent: %w", err)
	}
	// Shutdown waits for the runtime's goroutines: a connection may start
	// its watcher only if Shutdown has not begun (closed and the Add under
	// one lock), or the watcher would race Shutdown's Wait and outlive it.
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		_ = rwc.Close()
		return nil, ErrShutdown
	}
	r.wg.Add(1)
	r.mu.Unlock()

	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	c := &connection{
		rt:       r,
		nonce:    hex.EncodeToString(nonce[:]),
		rwc:      rwc,
		out:      &watchWriter{w: rwc},
		sessions: make(map[sessionKey]string),
		bound:    make(map[string]sessionKey),
		byPSID:   make(map[string]*turn),
		byRef:    make(map[host.TurnRef]*turn),
		children: make(map[string]*turn),
		waiters:  make(map[host.InteractionRef]*waiter),
	}
	input := gate.New(rwc)
	c.cs = acpsdk.NewClientSideConnection(&client{c: c}, c.out, input)
	c.cs.SetLogger(r.log)
	c.dead = c.cs.Done()
	input.Open()

	go func() {
		defer r.wg.Done()
		<-c.dead
		r.forget(c)
		c.stop()
		r.log.Info("agent connection closed", "connection", c.nonce)
	}()

	resp, err := c.cs.Initialize(ctx, acpsdk.InitializeRequest{
		ProtocolVersion: acpsdk.ProtocolVersionNumber,
		// No fs or terminal: the agent works on its own files.
		ClientCapabilities: clientCaps(),
		ClientInfo:         &acpsdk.Implementation{Name: "ensemble", Version: "0"},
	})
	if err != nil {
		c.stop()
		return nil, fmt.Errorf("acp: initialize: %w", err)
	}
	c.caps = resp.AgentCapabilities
	caps := resp.AgentCapabilities
	r.mu.Lock()
	r.caps = &caps
	r.mu.Unlock()
	attrs := []any{"connection", c.nonce, "protocol", resp.ProtocolVersion, "loadSession", resp.AgentCapabilities.LoadSession}
	if resp.AgentInfo != nil {
		attrs = append(attrs, "agentName", resp.AgentInfo.Name, "agentVersion", resp.AgentInfo.Version)
		info := *resp.AgentInfo
		r.mu.Lock()
		r.info = &info
		r.mu.Unlock()
	}
	r.log.Info("agent connected", attrs...)
	return c, nil
}

// stop ends the transport (and the agent process) and waits for it.
func (c *connection) stop() {
	c.stopOnce.Do(func() {
		if err := c.rwc.Close(); err != nil {
			c.rt.log.Debug("agent transport close", "err", err)
		}
	})
}

func (c *connection) isDead() bool {
	select {
	case <-c.dead:
		return true
	default:
		return false
	}
}

func (c *connection) sessionFor(key sessionKey) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	psid, ok := c.sessions[key]
	return psid, ok
}

// psidBound reports whether psid is live for a canonical session or still
// has a prompt running (after Close): loading it again would mix the
// replayed history into that prompt's output.
func (c *connection) psidBound(psid string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.bound[psid]
	return ok || c.byPSID[psid] != nil
}

func (c *connection) bindSession(key sessionKey, psid string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sessions[key] = psid
	c.bound[psid] = key
}

func (c *connection) unbindSession(key sessionKey) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	psid, ok := c.sessions[key]
	if ok {
		delete(c.sessions, key)
		delete(c.bound, psid)
	}
	return psid, ok
}

func (c *connection) turnByRef(ref host.TurnRef) *turn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byRef[ref]
}

func (c *connection) turnByPSID(psid string) *turn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byPSID[psid]
}

// cancelPrompt sends session/cancel for a provider session.
func (c *connection) cancelPrompt(ctx context.Context, psid string) error {
	return c.cs.Cancel(ctx, acpsdk.CancelNotification{SessionId: acpsdk.SessionId(psid)})
}

// watchWriter is the agent's input. The SDK writes each JSON-RPC message in
// one Write, so a registered token seen in a successful Write tells us that
// exact request reached the transport; it is how Dispatch learns the prompt
// was written (provider_observed) without the SDK exposing that moment.
type watchWriter struct {
	w       io.Writer
	mu      sync.Mutex
	watches map[string]chan struct{}
}

// watch registers token; the returned channel closes once it was written.
func (ww *watchWriter) watch(token string) (<-chan struct{}, error) {
	ww.mu.Lock()
	defer ww.mu.Unlock()
	if ww.watches == nil {
		ww.watches = make(map[string]chan struct{})
	}
	if _, dup := ww.watches[token]; dup {
		return nil, fmt.Errorf("a prompt with the same message id is already being written")
	}
	ch := make(chan struct{})
	ww.watches[token] = ch
	return ch, nil
}

func (ww *watchWriter) unwatch(token string) {
	ww.mu.Lock()
	delete(ww.watches, token)
	ww.mu.Unlock()
}

func (ww *watchWriter) Write(p []byte) (int, error) {
	n, err := ww.w.Write(p)
	if err != nil {
		return n, err
	}
	ww.mu.Lock()
	for token, ch := range ww.watches {
		if bytes.Contains(p, []byte(token)) {
			close(ch)
			delete(ww.watches, token)
		}
	}
	ww.mu.Unlock()
	return n, nil
}

func newRequest(cwd string) acpsdk.NewSessionRequest {
	return acpsdk.NewSessionRequest{Cwd: cwd, McpServers: []acpsdk.McpServer{}}
}

func loadRequest(psid, cwd string) acpsdk.LoadSessionRequest {
	return acpsdk.LoadSessionRequest{SessionId: acpsdk.SessionId(psid), Cwd: cwd, McpServers: []acpsdk.McpServer{}}
}

func closeRequest(psid string) acpsdk.CloseSessionRequest {
	return acpsdk.CloseSessionRequest{SessionId: acpsdk.SessionId(psid)}
}

// sendTimeout bounds best-effort notifications sent on our own behalf.
const sendTimeout = 5 * time.Second
