package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
	"golang.org/x/time/rate"

	"github.com/ensemble-dev/ensemble/auth"
	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/hub"
	"github.com/ensemble-dev/ensemble/protocol"
)

// expiryGrace extends a connection past its token's exp by the verifier's
// default leeway: a token Verify still accepts must not be closed at once,
// or the client would reconnect into the same close (a variable for tests).
var expiryGrace = auth.DefaultLeeway

// helloTimeout is how long a connection without an Authorization header
// has to send its hello frame (a variable so tests can shorten it).
var helloTimeout = 5 * time.Second

// maxIDBytes bounds a request id: 128 characters plus the JSON quotes.
const maxIDBytes = 130

var nullID = json.RawMessage("null")

// pongBytes is the pong as clients send it (JSON.stringify({type:'pong'})).
var pongBytes = []byte(`{"type":"pong"}`)

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

func unauthenticated(err error) protocol.Error {
	w := protocol.Error{Code: protocol.CodeUnauthenticated, Message: "missing or invalid token"}
	if errors.Is(err, auth.ErrExpired) {
		w.Message, w.Reason = "token expired", "token_expired"
	}
	return w
}

func (s *Server) handleWS(w http.ResponseWriter, r *http.Request) {
	if !s.enter() {
		writeHTTPError(w, http.StatusServiceUnavailable, protocol.Error{Code: protocol.CodeUnavailable,
			Message: "server is shutting down", Retryable: true, Reason: host.ReasonShuttingDown})
		return
	}
	handedOff := false // the connection's own goroutine owns active and release
	defer func() {
		if !handedOff {
			s.active.Done()
		}
	}()
	if !s.originAllowed(r) {
		s.log.Info("websocket origin refused", "origin", truncate(r.Header.Get("Origin"), 200), "remote", r.RemoteAddr)
		s.metrics.limit("origin")
		writeHTTPError(w, http.StatusForbidden, protocol.Error{Code: protocol.CodeForbidden,
			Message: "this origin may not open a WebSocket here", Reason: "origin_not_allowed"})
		return
	}
	var p auth.Principal
	var exp time.Time
	var release func()
	defer func() {
		if release != nil && !handedOff {
			release()
		}
	}()
	tok, hasHeader := bearerToken(r)
	if hasHeader {
		var err error
		if p, exp, err = s.cfg.Verifier.Verify(tok); err != nil {
			s.authFailed("ws", r.RemoteAddr, err)
			w.Header().Set("WWW-Authenticate", `Bearer`)
			writeHTTPError(w, http.StatusUnauthorized, unauthenticated(err))
			return
		}
		var ok bool
		if release, ok = s.conns.acquire(p.UserID); !ok {
			s.tooManyConns(p.UserID)
			retryAfter(w)
			writeHTTPError(w, http.StatusTooManyRequests, tooManyConnsError(s.limits.MaxConnsPerUser))
			return
		}
	} else {
		if s.pendingHello.Add(1) > int64(s.limits.MaxPendingHello) {
			s.pendingHello.Add(-1)
			s.log.Warn("websocket refused: too many connections waiting for hello", "limit", s.limits.MaxPendingHello)
			s.metrics.limit("pending_hello")
			writeHTTPError(w, http.StatusServiceUnavailable, protocol.Error{Code: protocol.CodeUnavailable,
				Message: "too many connections are authenticating; retry", Retryable: true, Reason: "pending_hello"})
			return
		}
	}
	hw := &smallHijack{ResponseWriter: w}
	ws, err := websocket.Accept(hw, r, &websocket.AcceptOptions{
		Subprotocols:    []string{protocol.SubprotocolBatch, protocol.Subprotocol}, // the newest the client offers
		CompressionMode: websocket.CompressionDisabled,
		OriginPatterns:  s.cfg.OriginPatterns,
	})
	if err != nil {
		if !hasHeader {
			s.pendingHello.Add(-1)
		}
		return // Accept answered the HTTP request
	}
	batch := ws.Subprotocol() == protocol.SubprotocolBatch
	if !batch && ws.Subprotocol() != protocol.Subprotocol {
		if !hasHeader {
			s.pendingHello.Add(-1)
		}
		_ = ws.Close(hub.CloseProtocol, "subprotocol ensemble.v1 required")
		return
	}
	ws.SetReadLimit(s.limits.MaxFrameBytes)
	if !hasHeader {
		p, exp, err = s.hello(ws, r.RemoteAddr)
		s.pendingHello.Add(-1)
		if err != nil {
			return
		}
		var ok bool
		if release, ok = s.conns.acquire(p.UserID); !ok {
			s.tooManyConns(p.UserID)
			closeWithError(ws, CloseTooManyConnections, "too many connections", tooManyConnsError(s.limits.MaxConnsPerUser))
			return
		}
	}
	id := host.RandomID("conn")
	opts := hub.ConnOptions{Batch: batch, Wire: hw.wire, ExpiredFrame: expiredFrame}
	if hw.socket != nil {
		opts.Socket, opts.Reader, opts.Drain = hw.socket, hw.reader, hw.drain
	}
	conn, err := s.cfg.Hub.Attach(ws, id, s.log, opts) // the hub logs the id: no logger per connection
	if err != nil {
		_ = ws.Close(hub.CloseShutdown, "server shutting down")
		return
	}
	if s.draining.Load() { // Shutdown may have listed connections before this one attached
		s.sendReconnect(conn)
	}
	s.metrics.wsOpened.Inc()
	conn.SetIdentity(p.UserID, p.Name)
	sess := &wsSession{s: s, conn: conn, protocol: protocol.Version + b2i(batch), remote: r.RemoteAddr, p: p, exp: exp, sem: make(chan struct{}, s.limits.MaxInFlight),
		limiter: rate.NewLimiter(limitOf(s.limits.RequestRate), s.limits.RequestBurst)}
	sess.sendReady()
	sess.armExpiry(exp)
	// Return from the handler: while it runs, net/http keeps the request,
	// the response and their 4 KiB read and write buffers reachable, about
	// 12 KiB per idle connection. The hub reads the connection from here
	// on, with no goroutine while it is idle (Linux), and calls back once
	// it has ended.
	handedOff = true
	conn.Start(sess.handleFrame, func() {
		sess.wg.Wait()
		if release != nil {
			release()
		}
		s.active.Done()
	})
}

func tooManyConnsError(limit int) protocol.Error {
	return protocol.Error{Code: protocol.CodeRateLimited, Retryable: true, Reason: "too_many_connections",
		Message: "this user already has " + strconv.Itoa(limit) + " connections open"}
}

func (s *Server) tooManyConns(user string) {
	s.log.Info("websocket refused: connection limit per user", "user", truncate(user, 64), "limit", s.limits.MaxConnsPerUser)
	s.metrics.limit("connections_per_user")
}

// closeWithError tells the client why, then closes.
func closeWithError(ws *websocket.Conn, code websocket.StatusCode, reason string, we protocol.Error) {
	b, _ := json.Marshal(protocol.ErrorFrame{Type: protocol.FrameError, Error: we})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = ws.Write(ctx, websocket.MessageText, b)
	cancel()
	_ = ws.Close(code, reason)
}

// hello waits for the first frame, which must be a hello with a valid
// token. On failure it tells the client why and closes the connection.
func (s *Server) hello(ws *websocket.Conn, remote string) (auth.Principal, time.Time, error) {
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
	fail := func(code websocket.StatusCode, reason string, we protocol.Error) error {
		closeWithError(ws, code, reason, we)
		return errors.New(reason)
	}
	timer := time.NewTimer(helloTimeout)
	defer timer.Stop()
	var rd read
	select {
	case rd = <-ch:
	case <-timer.C:
		s.authFailed("ws", remote, errNoHello)
		err := fail(hub.CloseUnauthenticated, "authentication timeout",
			protocol.Error{Code: protocol.CodeUnauthenticated, Message: "no hello within 5 s"})
		<-ch
		return auth.Principal{}, time.Time{}, err
	}
	if rd.err != nil {
		_ = ws.CloseNow() // includes a first frame over the size limit: the library closed with 1009
		return auth.Principal{}, time.Time{}, rd.err
	}
	var f protocol.ClientFrame
	if rd.typ != websocket.MessageText || decodeStrict(rd.data, &f) != nil || f.Type != protocol.FrameHello {
		return auth.Principal{}, time.Time{}, fail(hub.CloseProtocol, "expected a hello frame",
			protocol.Error{Code: protocol.CodeInvalidInput, Message: `the first frame must be {"type":"hello","token":…}`})
	}
	p, exp, err := s.cfg.Verifier.Verify(f.Token)
	if err != nil {
		s.authFailed("ws", remote, err)
		return auth.Principal{}, time.Time{}, fail(hub.CloseUnauthenticated, "unauthenticated", unauthenticated(err))
	}
	return p, exp, nil
}

var errNoHello = errors.New("no hello frame in time")

// authFailed logs and counts a refused token. The log carries the
// verifier's reason, never the token.
func (s *Server) authFailed(transport, remote string, err error) {
	reason := "invalid"
	switch {
	case errors.Is(err, errNoToken):
		reason = "missing"
	case errors.Is(err, errNoHello):
		reason = "no_hello"
	case errors.Is(err, auth.ErrExpired):
		reason = "expired"
	}
	s.metrics.authFailure(transport, reason)
	s.log.Info("authentication failed", "transport", transport, "reason", reason,
		"detail", truncate(err.Error(), 200), "remote", remote)
}

var errNoToken = errors.New("no bearer token")

// truncate cuts s to at most n bytes at a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// originAllowed applies the browser Origin allowlist: same-origin, a
// configured pattern, or no Origin at all (not a browser). The same
// patterns are given to websocket.Accept, which checks again.
func (s *Server) originAllowed(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	if strings.EqualFold(u.Host, r.Host) {
		return true
	}
	for _, p := range s.cfg.OriginPatterns {
		target := u.Host
		if strings.Contains(p, "://") {
			target = u.Scheme + "://" + u.Host
		}
		if ok, _ := path.Match(strings.ToLower(p), strings.ToLower(target)); ok {
			return true
		}
	}
	return false
}

// wsSession is one authenticated connection's request side.
type wsSession struct {
	s       *Server
	conn    *hub.Conn
	remote  string
	sem     chan struct{}
	limiter *rate.Limiter  // frames from the client
	wg      sync.WaitGroup // request handlers
	// protocol is the negotiated version: 2 with multi-event frames.
	protocol int

	mu  sync.Mutex
	p   auth.Principal
	exp time.Time
}

func (ws *wsSession) principal() auth.Principal {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.p
}

func (ws *wsSession) sendReady() {
	ws.mu.Lock()
	p, exp := ws.p, ws.exp
	ws.mu.Unlock()
	ws.conn.SendJSON(protocol.ReadyFrame{Type: protocol.FrameReady, Protocol: ws.protocol, ServerEpoch: ws.s.cfg.Host.Epoch(),
		ConnectionID: ws.conn.ID(), Principal: p, ExpiresAt: exp.UTC(), OffsetUnit: protocol.OffsetUnitUTF16,
		Agent:  protocol.FromAgentInfo(ws.s.cfg.Host.Agent()),
		Limits: protocol.ReadyLimits{MaxFrameBytes: ws.s.limits.MaxFrameBytes, MaxPromptBytes: ws.s.limits.MaxPromptBytes}})
}

// expiredFrame tells a client why its connection closes with 4010.
var expiredFrame, _ = json.Marshal(protocol.ErrorFrame{Type: protocol.FrameError, Error: protocol.Error{Code: protocol.CodeUnauthenticated,
	Message: "token expired", Reason: "token_expired"}})

// armExpiry has the hub close the connection with 4010 when the token
// expires (plus the verifier's leeway), unless a refresh re-arms it first.
// The hub's heartbeat ticker checks it: no timer per connection.
func (ws *wsSession) armExpiry(exp time.Time) {
	grace := ws.s.cfg.TokenLeeway
	if grace <= 0 {
		grace = expiryGrace
	}
	ws.conn.SetExpiry(exp.Add(grace))
}

func (ws *wsSession) respond(id json.RawMessage, op string, result any, err error) {
	if err != nil {
		we := toWire(err, ws.s.log, op)
		ws.s.metrics.request("ws", op, string(we.Code))
		ws.conn.SendJSON(protocol.ResponseFrame{Type: protocol.FrameResponse, ID: id, Error: &we})
		return
	}
	ws.s.metrics.request("ws", op, "ok")
	ws.conn.SendJSON(protocol.ResponseFrame{Type: protocol.FrameResponse, ID: id, OK: true, Result: result})
}

// respondSubscribed answers a subscribe latest-wins: while an earlier
// answer for the same topic is still unsent, that one (and its snapshot)
// is replaced by a small superseded error, so a client that re-subscribes
// without reading queues one snapshot per topic, not one per request.
func (ws *wsSession) respondSubscribed(id json.RawMessage, res protocol.SubscribeResult) {
	b, err := json.Marshal(protocol.ResponseFrame{Type: protocol.FrameResponse, ID: id, OK: true, Result: res})
	if err != nil {
		ws.respond(id, "subscribe", nil, err)
		return
	}
	repl, _ := json.Marshal(protocol.ResponseFrame{Type: protocol.FrameResponse, ID: id, Error: &protocol.Error{Code: protocol.CodeOperationConflict,
		Reason: "superseded", Message: "superseded by a later subscribe to the same topic on this connection"}})
	ws.s.metrics.request("ws", "subscribe", "ok")
	ws.conn.SendLatest("subscribe\x00"+res.Sub, b, repl)
}

// parseFrame is the frame decoder: one JSON object with no unknown
// fields, a known type, and for requests a string id of at most 128
// characters. On error it returns the id to echo (null when unreadable).
func parseFrame(data []byte) (protocol.ClientFrame, json.RawMessage, error) {
	if bytes.Equal(data, pongBytes) { // every idle client's answer to each heartbeat: skip the strict decoder
		return protocol.ClientFrame{Type: protocol.FramePong}, nullID, nil
	}
	var f protocol.ClientFrame
	if err := decodeStrict(data, &f); err != nil {
		return protocol.ClientFrame{}, salvageID(data), err
	}
	switch f.Type {
	case protocol.FrameRequest:
		id := bytes.TrimSpace(f.ID)
		if len(id) < 2 || id[0] != '"' || len(id) > maxIDBytes {
			return f, nullOr(id), errorf(host.CodeInvalidInput, "id must be a string of at most 128 characters")
		}
		if f.Token != "" {
			return f, id, errorf(host.CodeInvalidInput, "a request carries no token; refresh with the auth.refresh operation")
		}
		return f, id, nil
	case protocol.FrameHello, protocol.FramePing, protocol.FramePong:
		if len(f.ID) > 0 || f.Op != "" || len(f.Input) > 0 {
			return f, nullOr(f.ID), errorf(host.CodeInvalidInput, "a %s frame has no id, op or input", f.Type)
		}
		return f, nullID, nil
	}
	return f, nullOr(f.ID), errorf(host.CodeInvalidInput, "unknown frame type")
}

// handleFrame runs on the connection's reader goroutine: it decodes,
// applies the rate limit, and starts request handlers, which run
// concurrently (responses may come back in any order; match them by id).
// auth.refresh and hello run here, in order, so a request sent after a
// refresh runs with the refreshed principal.
func (ws *wsSession) handleFrame(data []byte) {
	f, id, err := parseFrame(data)
	if !ws.limiter.Allow() {
		ws.s.metrics.limit("request_rate")
		ws.respond(id, f.Op, nil, rateLimited("request_rate", "too many frames on this connection; slow down"))
		return
	}
	if err != nil {
		ws.respond(id, f.Op, nil, err)
		return
	}
	switch f.Type {
	case protocol.FrameRequest:
		if f.Op == protocol.OpAuthRefresh {
			ws.authRefresh(id, f.Input)
			return
		}
		select {
		case ws.sem <- struct{}{}:
		default:
			ws.s.metrics.limit("in_flight")
			ws.respond(id, f.Op, nil, rateLimited("in_flight", "too many requests in flight on this connection"))
			return
		}
		ws.s.inFlight.Add(1) // before the check, so Shutdown's wait cannot miss it
		if ws.s.draining.Load() {
			ws.s.inFlight.Add(-1)
			<-ws.sem
			ws.respond(id, f.Op, nil, &host.Error{Code: host.CodeUnavailable, Reason: "draining",
				Message: "this replica is draining; reconnect to another"})
			return
		}
		ws.wg.Add(1)
		go func() {
			defer ws.wg.Done()
			defer ws.s.inFlight.Add(-1)
			defer func() { <-ws.sem }()
			ws.runRequest(id, f.Op, f.Input)
		}()
	case protocol.FramePong:
	case protocol.FramePing:
		ws.conn.Send([]byte(`{"type":"pong"}`))
	case protocol.FrameHello:
		ws.refresh(f.Token)
	}
}

func (ws *wsSession) runRequest(id json.RawMessage, op string, input json.RawMessage) {
	defer func() { // a bug in one request must not take the process down
		if r := recover(); r != nil {
			ws.s.log.Error("request panicked", "op", opLabel(op), "panic", r)
			ws.respond(id, op, nil, &host.Error{Code: host.CodeInternal, Message: "internal error"})
		}
	}()
	if hook := ws.s.onRequest.Load(); hook != nil {
		(*hook)(op)
	}
	c := caller{p: ws.principal(), ws: ws}
	c.reply = func(result any) {
		if res, ok := result.(protocol.SubscribeResult); ok {
			ws.respondSubscribed(id, res)
			return
		}
		ws.respond(id, op, result, nil)
	}
	res, err := ws.s.dispatch(ws.conn.Context(), c, op, input)
	if errors.Is(err, errReplied) {
		return
	}
	ws.respond(id, op, res, err)
}

// authRefresh is the auth.refresh request: a new token for the same user
// replaces the connection's principal and expiry. A token that does not
// verify, or names another user, is answered with an error and changes
// nothing: the connection keeps its current token until that expires.
func (ws *wsSession) authRefresh(id json.RawMessage, raw json.RawMessage) {
	var in protocol.RefreshInput
	if err := decodeStrict(raw, &in); err != nil {
		ws.respond(id, protocol.OpAuthRefresh, nil, err)
		return
	}
	p, exp, err := ws.s.cfg.Verifier.Verify(in.Token)
	if err != nil {
		ws.s.authFailed("ws", ws.remote, err)
		we := unauthenticated(err)
		ws.respond(id, protocol.OpAuthRefresh, nil, &host.Error{Code: host.CodeUnauthenticated, Message: we.Message, Reason: we.Reason})
		return
	}
	if !ws.swapPrincipal(p, exp) {
		ws.respond(id, protocol.OpAuthRefresh, nil, &host.Error{Code: host.CodeInvalidInput, Reason: "different_user",
			Message: "a refreshed token must be for the same user"})
		return
	}
	ws.respond(id, protocol.OpAuthRefresh, protocol.RefreshResult{Principal: p, ExpiresAt: exp.UTC()}, nil)
}

// swapPrincipal installs a refreshed token for the same user, re-arms the
// expiry, and drops subscriptions in workspaces the new token no longer
// grants. It reports false (and changes nothing) for another user.
func (ws *wsSession) swapPrincipal(p auth.Principal, exp time.Time) bool {
	ws.mu.Lock()
	same := p.UserID == ws.p.UserID
	if same {
		ws.p, ws.exp = p, exp
	}
	ws.mu.Unlock()
	if !same {
		return false
	}
	ws.armExpiry(exp)
	ws.conn.SetIdentity(p.UserID, p.Name)
	for _, sub := range ws.conn.Subscriptions() {
		if role, ok := p.RoleIn(sub.Workspace); !ok || !auth.Allowed(role, "subscribe") {
			if ws.s.cfg.Hub.Unsubscribe(ws.conn, sub.Workspace, sub.Sub) {
				ws.conn.SendJSON(protocol.UnsubscribedFrame{Type: protocol.FrameUnsubscribed, Sub: sub.Sub, Reason: "forbidden"})
			}
		}
	}
	return true
}

// refresh is the older refresh by a hello frame after ready: an invalid
// token closes with 4501, another user's with 4500, a valid one answers
// with a fresh ready.
func (ws *wsSession) refresh(token string) {
	p, exp, err := ws.s.cfg.Verifier.Verify(token)
	if err != nil {
		ws.s.authFailed("ws", ws.remote, err)
		ws.conn.SendJSON(protocol.ErrorFrame{Type: protocol.FrameError, Error: unauthenticated(err)})
		ws.conn.Close(hub.CloseUnauthenticated, "unauthenticated")
		return
	}
	if !ws.swapPrincipal(p, exp) {
		ws.conn.SendJSON(protocol.ErrorFrame{Type: protocol.FrameError, Error: protocol.Error{Code: protocol.CodeInvalidInput,
			Message: "a refreshed token must be for the same user", Reason: "different_user"}})
		ws.conn.Close(hub.CloseProtocol, "token is for another user")
		return
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
	if len(id) == 0 || len(id) > maxIDBytes || !json.Valid(id) {
		return nullID
	}
	return id
}
