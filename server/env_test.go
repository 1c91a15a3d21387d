package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/ensemble-dev/ensemble/auth"
	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/hub"
	"github.com/ensemble-dev/ensemble/protocol"
	"github.com/ensemble-dev/ensemble/runtime/acp"
	"github.com/ensemble-dev/ensemble/runtime/sim"
	"github.com/ensemble-dev/ensemble/sqlite"
)

var testSecret = []byte("server-test-secret-0123456789abcdef")

const testWS = "w1"

// env is a whole server on real boundaries: SQLite store, the sim agent
// over ACP, the in-process bus, the hub and an httptest listener.
type env struct {
	t      *testing.T
	host   *host.Host
	hub    *hub.Hub
	srv    *Server
	ts     *httptest.Server
	member string // tokens
	viewer string
	admin  string
}

type envOpts struct {
	hub hub.Config
	// Security settings (security_test.go); zero values: the HS256 test
	// secret, default limits, same-origin only, a discarded log.
	verifier auth.Verifier
	limits   Limits
	origins  []string
	leeway   time.Duration
	logger   *slog.Logger
	// workspaceRoot bounds session working directories (fork_ops_test.go).
	workspaceRoot string
}

func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	if o.logger != nil {
		log = o.logger
	}
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "ensemble.db"), sqlite.Options{})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	rt := acp.New(acp.Config{Name: sim.Name, Simulated: true, Logger: log,
		Dial: sim.Dial(sim.Options{Rate: time.Millisecond, Logger: log})})
	bus := hub.NewLocalBus()
	h := host.New(host.Config{Store: st, Runtime: rt, Observer: bus, Logger: log, WorkspaceRoot: o.workspaceRoot})
	if _, err := h.Recover(ctx); err != nil {
		t.Fatalf("recover: %v", err)
	}
	runCtx, stopRun := context.WithCancel(ctx)
	runDone := make(chan struct{})
	go func() { _ = h.Run(runCtx); close(runDone) }()
	hc := o.hub
	hc.Reader, hc.Goals, hc.Queues, hc.Agent, hc.Bus, hc.Logger = h, h, h, h, bus, log
	hb := hub.New(hc)
	verifier := o.verifier
	if verifier == nil {
		verifier = auth.NewHMAC(testSecret, auth.Options{})
	}
	srv := New(Config{Host: h, Hub: hb, Verifier: verifier, Logger: log, Limits: o.limits, OriginPatterns: o.origins,
		TokenLeeway: o.leeway})
	ts := httptest.NewServer(srv)
	e := &env{t: t, host: h, hub: hb, srv: srv, ts: ts}
	e.member = e.token("alice", auth.RoleMember, time.Hour)
	e.viewer = e.token("victor", auth.RoleViewer, time.Hour)
	e.admin = e.token("ada", auth.RoleAdmin, time.Hour)
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		ts.Close()
		hb.Close()
		stopRun()
		<-runDone
		_ = rt.Shutdown(sctx)
		_ = st.Close()
	})
	return e
}

func (e *env) token(user string, role auth.Role, ttl time.Duration) string {
	tok, err := auth.Mint(testSecret, auth.Claims{Sub: user, Name: strings.ToUpper(user[:1]) + user[1:],
		Workspaces: map[string]auth.Role{testWS: role}, TTL: ttl})
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

func (e *env) wsURL() string { return "ws" + strings.TrimPrefix(e.ts.URL, "http") + "/v1/ws" }

// frame is any server frame, kept raw for byte comparisons.
type frame struct {
	Type    string          `json:"type"`
	ID      json.RawMessage `json:"id"`
	OK      bool            `json:"ok"`
	Result  json.RawMessage `json:"result"`
	Error   *protocol.Error `json:"error"`
	Sub     string          `json:"sub"`
	Epoch   string          `json:"epoch"`
	Seq     int64           `json:"seq"`
	Kind    string          `json:"kind"`
	Payload json.RawMessage `json:"payload"`
	raw     []byte
}

// client is a real coder/websocket client with a reader goroutine.
type client struct {
	t       *testing.T
	c       *websocket.Conn
	frames  chan frame
	closed  chan struct{}
	err     error // read error once closed
	ready   frame
	nextID  atomic.Int64
	batches atomic.Int64 // multi-event frames received (protocol 2)
	// events holds events seen while waiting for responses.
	mu     sync.Mutex
	events []frame
}

// dial connects; with hello the token goes in a first frame, otherwise in
// the Authorization header. It waits for ready.
func (e *env) dial(token string, hello bool) *client {
	e.t.Helper()
	cl := e.dialRaw(token, hello)
	f := cl.next(5 * time.Second)
	if f.Type != "ready" {
		e.t.Fatalf("want ready, got %s", f.raw)
	}
	cl.ready = f
	return cl
}

func (e *env) dialRaw(token string, hello bool) *client {
	return e.dialProto(token, hello, protocol.Subprotocol)
}

func (e *env) dialProto(token string, hello bool, protocols ...string) *client {
	e.t.Helper()
	opts := &websocket.DialOptions{Subprotocols: protocols}
	if !hello && token != "" {
		opts.HTTPHeader = http.Header{"Authorization": {"Bearer " + token}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, e.wsURL(), opts)
	if err != nil {
		e.t.Fatalf("dial: %v", err)
	}
	c.SetReadLimit(16 << 20)
	cl := &client{t: e.t, c: c, frames: make(chan frame, 4096), closed: make(chan struct{})}
	go cl.readLoop()
	e.t.Cleanup(func() { _ = c.CloseNow() })
	if hello {
		cl.send(map[string]any{"type": "hello", "token": token})
	}
	return cl
}

func (cl *client) readLoop() {
	defer close(cl.closed)
	for {
		_, data, err := cl.c.Read(context.Background())
		if err != nil {
			cl.err = err
			close(cl.frames)
			return
		}
		frames := [][]byte{data}
		if data[0] == '[' { // protocol 2: several frames in one
			var raws []json.RawMessage
			if err := json.Unmarshal(data, &raws); err != nil {
				cl.err = fmt.Errorf("bad batch %q: %w", data, err)
				continue
			}
			cl.batches.Add(1)
			frames = frames[:0]
			for _, r := range raws {
				frames = append(frames, r)
			}
		}
		for _, data := range frames {
			var f frame
			if err := json.Unmarshal(data, &f); err != nil {
				cl.err = fmt.Errorf("bad frame %q: %w", data, err)
				continue
			}
			f.raw = data
			if f.Type == "ping" {
				continue
			}
			cl.frames <- f
		}
	}
}

func (cl *client) send(v any) {
	cl.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		cl.t.Fatal(err)
	}
	cl.sendRaw(b)
}

func (cl *client) sendRaw(b []byte) {
	cl.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := cl.c.Write(ctx, websocket.MessageText, b); err != nil {
		cl.t.Fatalf("write: %v", err)
	}
}

// next returns the next frame or fails the test after d.
func (cl *client) next(d time.Duration) frame {
	cl.t.Helper()
	select {
	case f, ok := <-cl.frames:
		if !ok {
			cl.t.Fatalf("connection closed: %v", cl.err)
		}
		return f
	case <-time.After(d):
		cl.t.Fatalf("no frame within %v", d)
	}
	return frame{}
}

// closeStatus waits for the server to close the connection.
func (cl *client) closeStatus(d time.Duration) websocket.StatusCode {
	cl.t.Helper()
	deadline := time.After(d)
	for {
		select {
		case _, ok := <-cl.frames:
			if !ok {
				return websocket.CloseStatus(cl.err)
			}
		case <-deadline:
			cl.t.Fatalf("connection not closed within %v", d)
		}
	}
}

// request sends one request and waits for its response; events that
// arrive meanwhile are kept for takeEvents.
func (cl *client) request(op string, input any) frame {
	cl.t.Helper()
	id := fmt.Sprintf("r%d", cl.nextID.Add(1))
	cl.send(map[string]any{"type": "request", "id": id, "op": op, "input": input})
	return cl.await(id)
}

func (cl *client) await(id string) frame {
	cl.t.Helper()
	want, _ := json.Marshal(id)
	deadline := time.After(30 * time.Second)
	for {
		select {
		case f, ok := <-cl.frames:
			if !ok {
				cl.t.Fatalf("connection closed awaiting %s: %v", id, cl.err)
			}
			if f.Type == "response" && bytes.Equal(f.ID, want) {
				return f
			}
			cl.mu.Lock()
			cl.events = append(cl.events, f)
			cl.mu.Unlock()
		case <-deadline:
			cl.t.Fatalf("no response to %s", id)
		}
	}
}

// must asserts ok and decodes the result.
func (cl *client) must(op string, input any, out any) {
	cl.t.Helper()
	f := cl.request(op, input)
	if !f.OK {
		cl.t.Fatalf("%s failed: %s", op, f.raw)
	}
	if out != nil {
		if err := json.Unmarshal(f.Result, out); err != nil {
			cl.t.Fatalf("%s result: %v", op, err)
		}
	}
}

// nextEvent returns the next event (kept ones first).
func (cl *client) nextEvent(d time.Duration) frame {
	cl.t.Helper()
	cl.mu.Lock()
	if len(cl.events) > 0 {
		f := cl.events[0]
		cl.events = cl.events[1:]
		cl.mu.Unlock()
		return f
	}
	cl.mu.Unlock()
	for {
		f := cl.next(d)
		if f.Type == "event" {
			return f
		}
	}
}

// httpDo runs one REST call and decodes the JSON body.
func (e *env) httpDo(method, path, token string, body any, out any) int {
	e.t.Helper()
	var rd io.Reader
	if s, ok := body.(string); ok {
		rd = strings.NewReader(s)
	} else if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, e.ts.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			e.t.Fatalf("%s %s: %d %q: %v", method, path, resp.StatusCode, b, err)
		}
	}
	return resp.StatusCode
}

type errBody struct {
	Error protocol.Error `json:"error"`
}

// waitSettled polls until the turn settles.
func (e *env) waitSettled(sessionID, turnID string) host.Turn {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		tr, err := e.host.GetTurn(context.Background(), testWS, sessionID, turnID)
		if err != nil {
			e.t.Fatal(err)
		}
		if tr.Settled() {
			return tr
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.t.Fatalf("turn %s did not settle", turnID)
	return host.Turn{}
}
