package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/ensemble-dev/ensemble/auth"
	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/hub"
)

// expiryGrace extends a connection past its token's exp by the verifier's
// default leeway: a token Verify still accepts must not be closed at once,
// or the client would reconnect into the same close (a variable for tests).
var expiryGrace = auth.DefaultLeeway

// helloTimeout is how long a connection without an Authorization header
// has to send its hello frame (a variable so tests can shorten it).
var helloTimeout = 5 * time.Second

const (
	// readLimit bounds one client frame. Larger content (up to the Host's
	// 256 KiB) is submitted over HTTP.
	readLimit = 64 << 10
	// maxInFlight requests per connection; more answer rate_limited.
	maxInFlight = 16
)

// clientFrame is every frame a client may send.
type clientFrame struct {
	Type  string          `json:"type"`
	ID    json.RawMessage `json:"id,omitempty"`
	Op    string          `json:"op,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
	Token string          `json:"token,omitempty"`
}

type responseFrame struct {
	Type   string          `json:"type"`
	ID     json.RawMessage `json:"id"`
	OK     bool            `json:"ok"`
	Result any             `json:"result,omitempty"`
	Error  *wireError      `json:"error,omitempty"`
}

type readyFrame struct {
	Type         string         `json:"type"`
	Protocol     int            `json:"protocol"`
	ServerEpoch  string         `json:"serverEpoch"`
	ConnectionID string         `json:"connectionId"`
	Principal    auth.Principal `json:"principal"`
	// OffsetUnit names the unit of message_delta offsets.
	OffsetUnit string `json:"offsetUnit"`
}

type errorFrame struct {
	Type  string    `json:"type"`
	Error wireError `json:"error"`
}

type unsubscribedFrame struct {
	Type   string `json:"type"`
	Sub    string `json:"sub"`
	Reason string `json:"reason"`
}

var nullID = json.RawMessage("null")

// bearerToken extracts the token of an Authorization: Bearer header.
func bearerToken(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", false
	}
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return "", true
	}
	return strings.TrimSpace(tok), true
}

func unauthenticated(err error) wireError {
	w := wireError{Code: host.CodeUnauthenticated, Message: "missing or invalid token"}
	if errors.Is(err, auth.ErrExpired) {
		w.Message, w.Reason = "token expired", "token_expired"
	}
	return w
}

func (s *Server) handleWS(w http.ResponseWriter, r *http.Request) {
	if !s.enter() {
		writeHTTPError(w, http.StatusServiceUnavailable, wireError{Code: host.CodeUnavailable,
			Message: "server is shutting down", Retryable: true})
		return
	}
	defer s.active.Done()
	var p auth.Principal
	var exp time.Time
	tok, hasHeader := bearerToken(r)
	if hasHeader {
		var err error
		if p, exp, err = s.cfg.Verifier.Verify(tok); err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer`)
			writeHTTPError(w, http.StatusUnauthorized, unauthenticated(err))
			return
		}
	}
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		Subprotocols:    []string{Subprotocol},
		CompressionMode: websocket.CompressionDisabled,
		OriginPatterns:  s.cfg.OriginPatterns,
	})
	if err != nil {
		return // Accept answered the HTTP request
	}
	if ws.Subprotocol() != Subprotocol {
		_ = ws.Close(hub.CloseProtocol, "subprotocol ensemble.v1 required")
		return
	}
	ws.SetReadLimit(readLimit)
	if !hasHeader {
		if p, exp, err = s.hello(ws); err != nil {
			return
		}
	}
	id := host.RandomID("conn")
	conn, err := s.cfg.Hub.Attach(ws, id, s.log.With("conn", id))
	if err != nil {
		_ = ws.Close(hub.CloseShutdown, "server shutting down")
		return
	}
	if s.draining.Load() { // Shutdown may have listed connections before this one attached
		conn.Close(hub.CloseShutdown, "server shutting down")
	}
	s.metrics.wsOpened.Inc()
	sess := &wsSession{s: s, conn: conn, p: p, sem: make(chan struct{}, maxInFlight)}
	sess.sendReady()
	sess.armExpiry(exp)
	conn.Run(sess.handleFrame)
	sess.stopExpiry()
	sess.wg.Wait()
}

// hello waits for the first frame, which must be a hello with a valid
// token. On failure it tells the client why and closes the connection.
func (s *Server) hello(ws *websocket.Conn) (auth.Principal, time.Time, error) {
	type read struct {
		typ  websocket.MessageType
		data []byte
		err  error
	}
	ch := make(chan read, 1)
	go func() { // reads without a cancelable context so a timeout can still close cleanly
		typ, data, err := ws.Read(context.Background())
		ch <- read{typ, data, err}
	}()
	fail := func(code websocket.StatusCode, reason string, we wireError) error {
		b, _ := json.Marshal(errorFrame{Type: "error", Error: we})
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = ws.Write(ctx, websocket.MessageText, b)
		cancel()
		_ = ws.Close(code, reason)
		return errors.New(reason)
	}
	timer := time.NewTimer(helloTimeout)
	defer timer.Stop()
	var rd read
	select {
	case rd = <-ch:
	case <-timer.C:
		err := fail(hub.CloseUnauthenticated, "authentication timeout",
			wireError{Code: host.CodeUnauthenticated, Message: "no hello within 5 s"})
		<-ch
		return auth.Principal{}, time.Time{}, err
	}
	if rd.err != nil {
		_ = ws.CloseNow()
		return auth.Principal{}, time.Time{}, rd.err
	}
	var f clientFrame
	if rd.typ != websocket.MessageText || decodeStrict(rd.data, &f) != nil || f.Type != "hello" {
		return auth.Principal{}, time.Time{}, fail(hub.CloseProtocol, "expected a hello frame",
			wireError{Code: host.CodeInvalidInput, Message: `the first frame must be {"type":"hello","token":…}`})
	}
	p, exp, err := s.cfg.Verifier.Verify(f.Token)
	if err != nil {
		return auth.Principal{}, time.Time{}, fail(hub.CloseUnauthenticated, "unauthenticated", unauthenticated(err))
	}
	return p, exp, nil
}

// wsSession is one authenticated connection's request side.
type wsSession struct {
	s    *Server
	conn *hub.Conn
	sem  chan struct{}
	wg   sync.WaitGroup // request handlers

	mu     sync.Mutex
	p      auth.Principal
	expiry *time.Timer
}

func (ws *wsSession) principal() auth.Principal {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.p
}

func (ws *wsSession) sendReady() {
	ws.conn.SendJSON(readyFrame{Type: "ready", Protocol: ProtocolVersion, ServerEpoch: ws.s.cfg.Host.Epoch(),
		ConnectionID: ws.conn.ID(), Principal: ws.principal(), OffsetUnit: "utf16"})
}

// armExpiry closes the connection with 4010 when the token expires, unless
// a hello frame refreshes it first.
func (ws *wsSession) armExpiry(exp time.Time) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.expiry != nil {
		ws.expiry.Stop()
	}
	ws.expiry = time.AfterFunc(time.Until(exp)+expiryGrace, func() {
		ws.conn.SendJSON(errorFrame{Type: "error", Error: wireError{Code: host.CodeUnauthenticated,
			Message: "token expired", Reason: "token_expired"}})
		ws.conn.Close(hub.CloseTokenExpired, "token expired")
	})
}

func (ws *wsSession) stopExpiry() {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.expiry != nil {
		ws.expiry.Stop()
	}
}

func (ws *wsSession) respond(id json.RawMessage, op string, result any, err error) {
	if err != nil {
		we := toWire(err, ws.s.log, op)
		ws.s.metrics.request("ws", op, string(we.Code))
		ws.conn.SendJSON(responseFrame{Type: "response", ID: id, Error: &we})
		return
	}
	ws.s.metrics.request("ws", op, "ok")
	ws.conn.SendJSON(responseFrame{Type: "response", ID: id, OK: true, Result: result})
}

// handleFrame runs on the connection's reader goroutine: it decodes and
// starts request handlers, which run concurrently (responses may come back
// in any order; match them by id).
func (ws *wsSession) handleFrame(data []byte) {
	var f clientFrame
	if err := decodeStrict(data, &f); err != nil {
		ws.respond(salvageID(data), "", nil, err)
		return
	}
	switch f.Type {
	case "request":
		id := f.ID
		if len(id) == 0 || id[0] != '"' || len(id) > 130 {
			ws.respond(nullOr(id), f.Op, nil, errorf(host.CodeInvalidInput, "id must be a string of at most 128 characters"))
			return
		}
		select {
		case ws.sem <- struct{}{}:
		default:
			ws.respond(id, f.Op, nil, &host.Error{Code: host.CodeRateLimited,
				Message: "too many requests in flight on this connection"})
			return
		}
		ws.wg.Add(1)
		go func() {
			defer ws.wg.Done()
			defer func() { <-ws.sem }()
			ws.runRequest(id, f.Op, f.Input)
		}()
	case "pong":
	case "ping":
		ws.conn.Send([]byte(`{"type":"pong"}`))
	case "hello":
		ws.refresh(f.Token)
	default:
		ws.respond(nullOr(f.ID), "", nil, errorf(host.CodeInvalidInput, "unknown frame type"))
	}
}

func (ws *wsSession) runRequest(id json.RawMessage, op string, input json.RawMessage) {
	defer func() { // a bug in one request must not take the process down
		if r := recover(); r != nil {
			ws.s.log.Error("request panicked", "op", opLabel(op), "panic", r)
			ws.respond(id, op, nil, &host.Error{Code: host.CodeInternal, Message: "internal error"})
		}
	}()
	c := caller{p: ws.principal(), ws: ws}
	c.reply = func(result any) { ws.respond(id, op, result, nil) }
	res, err := ws.s.dispatch(ws.conn.Context(), c, op, input)
	if errors.Is(err, errReplied) {
		return
	}
	ws.respond(id, op, res, err)
}

// refresh swaps in a new token for the same user (a hello after ready).
// Subscriptions in workspaces the new token no longer grants are dropped.
func (ws *wsSession) refresh(token string) {
	p, exp, err := ws.s.cfg.Verifier.Verify(token)
	if err != nil {
		ws.conn.SendJSON(errorFrame{Type: "error", Error: unauthenticated(err)})
		ws.conn.Close(hub.CloseUnauthenticated, "unauthenticated")
		return
	}
	ws.mu.Lock()
	same := p.UserID == ws.p.UserID
	if same {
		ws.p = p
	}
	ws.mu.Unlock()
	if !same {
		ws.conn.SendJSON(errorFrame{Type: "error", Error: wireError{Code: host.CodeInvalidInput,
			Message: "a refreshed token must be for the same user"}})
		ws.conn.Close(hub.CloseProtocol, "token is for another user")
		return
	}
	ws.armExpiry(exp)
	for _, sub := range ws.conn.Subscriptions() {
		if role, ok := p.RoleIn(sub.Workspace); !ok || !auth.Allowed(role, "subscribe") {
			if ws.s.cfg.Hub.Unsubscribe(ws.conn, sub.Workspace, sub.Sub) {
				ws.conn.SendJSON(unsubscribedFrame{Type: "unsubscribed", Sub: sub.Sub, Reason: "forbidden"})
			}
		}
	}
	ws.sendReady()
}

// salvageID finds the id of a frame that failed strict decoding, so the
// client can still match the error to its request.
func salvageID(data []byte) json.RawMessage {
	var loose struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(data, &loose) != nil {
		return nullID
	}
	return nullOr(loose.ID)
}

func nullOr(id json.RawMessage) json.RawMessage {
	id = bytes.TrimSpace(id)
	if len(id) == 0 || len(id) > 130 {
		return nullID
	}
	return id
}
