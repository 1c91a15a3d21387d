package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"

	"github.com/ensemble-dev/ensemble/auth"
	"github.com/ensemble-dev/ensemble/auth/authtest"
	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/hub"
	"github.com/ensemble-dev/ensemble/protocol"
)

// shortToken expires within two seconds (exp has one-second resolution).
func shortToken(t *testing.T, sub string) string {
	t.Helper()
	tok, err := signRaw(testSecret, map[string]any{"sub": sub, "exp": time.Now().Add(2 * time.Second).Unix(),
		"workspaces": map[string]string{testWS: "member"}})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// Two watchers of one session hold the same short-lived token. One
// refreshes it in band with auth.refresh; the other does not. The second is
// closed with 4010 when its token expires; the first keeps its
// subscription and keeps receiving events after that moment.
func TestTokenExpiryMidSubscription(t *testing.T) {
	e := newEnv(t, envOpts{leeway: time.Nanosecond})
	owner := e.dial(e.member, false)
	sess := createSession(t, owner)

	tok := shortToken(t, "alice")
	stale, fresh := e.dial(tok, true), e.dial(tok, false)
	subscribeSession(t, stale, sess.ID, nil)
	subFresh := subscribeSession(t, fresh, sess.ID, nil)
	var ready protocol.ReadyFrame
	mustJSON(t, fresh.ready.raw, &ready)
	if ready.ExpiresAt.IsZero() || time.Until(ready.ExpiresAt) > 3*time.Second {
		t.Fatalf("ready.expiresAt %v", ready.ExpiresAt)
	}

	f := fresh.request("auth.refresh", map[string]any{"token": e.token("alice", auth.RoleMember, time.Hour)})
	var rr protocol.RefreshResult
	if !f.OK {
		t.Fatalf("refresh: %s", f.raw)
	}
	mustJSON(t, f.Result, &rr)
	if rr.Principal.UserID != "alice" || time.Until(rr.ExpiresAt) < 59*time.Minute {
		t.Fatalf("refresh result %+v", rr)
	}

	// The stale one: an error frame saying why, then 4010 (reconnect).
	for {
		f := stale.next(10 * time.Second)
		if f.Type == "error" {
			if f.Error.Code != protocol.CodeUnauthenticated || f.Error.Reason != "token_expired" {
				t.Fatalf("expiry error %s", f.raw)
			}
			break
		}
	}
	if code := stale.closeStatus(5 * time.Second); code != hub.CloseTokenExpired {
		t.Fatalf("stale close %d, want 4010", code)
	}

	// The original token has now expired; the refreshed connection still
	// works and its subscription still delivers.
	var sr host.SendResult
	fresh.must("turn.message.submit", map[string]any{"workspace": testWS, "sessionId": sess.ID, "clientSubmitId": "after-expiry",
		"content": map[string]any{"text": "/sim words=5\nstill here?"}}, &sr)
	evs := collectUntilSettled(t, fresh, subFresh.Sub, subFresh.Seq, sr.Turn.ID)
	if len(evs) == 0 {
		t.Fatal("no events after the original expiry")
	}
}

func TestAuthRefreshRefusals(t *testing.T) {
	e := newEnv(t, envOpts{})
	owner := e.dial(e.member, false)
	sess := createSession(t, owner)
	cl := e.dial(e.member, true)
	sub := subscribeSession(t, cl, sess.ID, nil)

	cases := []struct {
		name  string
		input map[string]any
		code  protocol.Code
		rsn   string
	}{
		{"garbage", map[string]any{"token": "not-a-jwt"}, protocol.CodeUnauthenticated, ""},
		{"expired", map[string]any{"token": e.tokenExpired()}, protocol.CodeUnauthenticated, "token_expired"},
		{"another user", map[string]any{"token": e.token("mallory", auth.RoleAdmin, time.Hour)}, protocol.CodeInvalidInput, "different_user"},
		{"unknown field", map[string]any{"token": e.member, "extra": 1}, protocol.CodeInvalidInput, ""},
	}
	for _, c := range cases {
		f := cl.request("auth.refresh", c.input)
		if f.OK || f.Error.Code != c.code || f.Error.Reason != c.rsn {
			t.Errorf("%s: %s", c.name, f.raw)
		}
	}
	// Nothing changed: still alice, still a member, still subscribed.
	var res protocol.CreateSessionResult
	cl.must("session.create", map[string]any{"workspace": testWS}, &res)
	if res.Session.CreatedBy != "alice" {
		t.Fatalf("principal changed: %+v", res.Session)
	}

	// A token that no longer grants the workspace drops the subscription.
	other, err := auth.Mint(testSecret, auth.Claims{Sub: "alice", Workspaces: map[string]auth.Role{"elsewhere": auth.RoleAdmin}})
	if err != nil {
		t.Fatal(err)
	}
	cl.send(map[string]any{"type": "request", "id": "narrow", "op": "auth.refresh", "input": map[string]any{"token": other}})
	gotUnsub := false
	for {
		f := cl.next(5 * time.Second)
		if f.Type == "unsubscribed" && f.Sub == sub.Sub {
			gotUnsub = true
			continue
		}
		if f.Type == "response" && string(f.ID) == `"narrow"` {
			if !f.OK || !gotUnsub {
				t.Fatalf("narrowing refresh: %s (unsubscribed first: %v)", f.raw, gotUnsub)
			}
			break
		}
	}
	f := cl.request("session.get", map[string]any{"workspace": testWS, "sessionId": sess.ID})
	if f.OK || f.Error.Code != protocol.CodeForbidden {
		t.Fatalf("after narrowing: %s", f.raw)
	}
}

func TestFrameSizeLimit(t *testing.T) {
	e := newEnv(t, envOpts{limits: Limits{MaxFrameBytes: 4096}})
	big := `{"type":"request","id":"big","op":"session.list","input":{"workspace":"w1","cursor":"` + strings.Repeat("x", 5000) + `"}}`

	cl := e.dial(e.member, false)
	cl.sendRaw([]byte(big))
	if code := cl.closeStatus(5 * time.Second); code != websocket.StatusMessageTooBig {
		t.Fatalf("close %d, want 1009", code)
	}
	// Also as the first frame, before authentication.
	cl = e.dialRaw("", false)
	cl.sendRaw([]byte(`{"type":"hello","token":"` + strings.Repeat("x", 5000) + `"}`))
	if code := cl.closeStatus(5 * time.Second); code != websocket.StatusMessageTooBig {
		t.Fatalf("hello close %d, want 1009", code)
	}
	// Just under the limit is fine.
	cl = e.dial(e.member, false)
	f := cl.request("session.list", map[string]any{"workspace": testWS, "cursor": strings.Repeat("x", 3000)})
	if f.Type != "response" {
		t.Fatalf("under the limit: %s", f.raw)
	}
}

func TestRequestRateLimit(t *testing.T) {
	// One frame an hour after a burst of three: deterministic.
	e := newEnv(t, envOpts{limits: Limits{RequestRate: 1.0 / 3600, RequestBurst: 3}})
	cl := e.dial(e.member, false)
	for i := range 3 {
		if f := cl.request("session.list", map[string]any{"workspace": testWS}); !f.OK {
			t.Fatalf("request %d: %s", i, f.raw)
		}
	}
	for range 3 {
		f := cl.request("session.list", map[string]any{"workspace": testWS})
		if f.OK || f.Error.Code != protocol.CodeRateLimited || !f.Error.Retryable || f.Error.Reason != "request_rate" {
			t.Fatalf("over the rate: %s", f.raw)
		}
	}
	// Another connection has its own budget.
	if f := e.dial(e.member, true).request("session.list", map[string]any{"workspace": testWS}); !f.OK {
		t.Fatalf("second connection: %s", f.raw)
	}
}

func TestInFlightLimit(t *testing.T) {
	e := newEnv(t, envOpts{limits: Limits{MaxInFlight: 2}})
	release := make(chan struct{})
	started := make(chan struct{}, 8)
	hook := func(op string) {
		if op == "session.get" {
			started <- struct{}{}
			<-release
		}
	}
	e.srv.onRequest.Store(&hook)
	cl := e.dial(e.member, false)
	for _, id := range []string{"h1", "h2"} {
		cl.send(map[string]any{"type": "request", "id": id, "op": "session.get", "input": map[string]any{"workspace": testWS, "sessionId": "ses_x"}})
		<-started
	}
	f := cl.request("session.list", map[string]any{"workspace": testWS})
	if f.OK || f.Error.Code != protocol.CodeRateLimited || f.Error.Reason != "in_flight" || !f.Error.Retryable {
		t.Fatalf("third in flight: %s", f.raw)
	}
	close(release)
	for seen := map[string]bool{}; len(seen) < 2; { // the two answers come in either order
		f := cl.next(10 * time.Second)
		if f.Type != "response" {
			continue
		}
		if f.OK || f.Error.Code != protocol.CodeNotFound {
			t.Fatalf("held request: %s", f.raw)
		}
		seen[string(f.ID)] = true
	}
	if f := cl.request("session.list", map[string]any{"workspace": testWS}); !f.OK {
		t.Fatalf("after the held requests: %s", f.raw)
	}
}

func TestConnectionLimitPerUser(t *testing.T) {
	e := newEnv(t, envOpts{limits: Limits{MaxConnsPerUser: 2}})
	a, _ := e.dial(e.member, false), e.dial(e.member, true)

	// A third by header: 429 before the upgrade.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, e.wsURL(), &websocket.DialOptions{Subprotocols: []string{protocol.Subprotocol},
		HTTPHeader: http.Header{"Authorization": {"Bearer " + e.member}}})
	if err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("third by header: %v %v", resp, err)
	}
	b, _ := io.ReadAll(resp.Body)
	var eb errBody
	if json.Unmarshal(b, &eb) != nil || eb.Error.Code != protocol.CodeRateLimited || eb.Error.Reason != "too_many_connections" {
		t.Fatalf("third by header: %s", b)
	}
	// A third by hello: an error frame, then 4029.
	cl := e.dialRaw(e.member, true)
	f := cl.next(5 * time.Second)
	if f.Type != "error" || f.Error.Code != protocol.CodeRateLimited || f.Error.Reason != "too_many_connections" {
		t.Fatalf("third by hello: %s", f.raw)
	}
	if code := cl.closeStatus(5 * time.Second); code != CloseTooManyConnections {
		t.Fatalf("close %d, want 4029", code)
	}
	// Other users are not affected.
	e.dial(e.viewer, false)
	// Closing one frees a slot.
	_ = a.c.Close(websocket.StatusNormalClosure, "")
	waitFor(t, func() bool {
		c, _, err := websocket.Dial(ctx, e.wsURL(), &websocket.DialOptions{Subprotocols: []string{protocol.Subprotocol},
			HTTPHeader: http.Header{"Authorization": {"Bearer " + e.member}}})
		if err != nil {
			return false
		}
		_ = c.CloseNow()
		return true
	})
}

func TestPendingHelloLimit(t *testing.T) {
	e := newEnv(t, envOpts{limits: Limits{MaxPendingHello: 1}})
	waiting := e.dialRaw("", false) // upgraded, no hello yet
	code := e.httpDoWS("")
	if code != http.StatusServiceUnavailable {
		t.Fatalf("second pending connection: %d", code)
	}
	// Authenticated by header: not pending, so not limited.
	e.dial(e.member, false)
	// Once the first says hello, the slot is free.
	waiting.send(map[string]any{"type": "hello", "token": e.member})
	if f := waiting.next(5 * time.Second); f.Type != "ready" {
		t.Fatalf("hello: %s", f.raw)
	}
	// The slot is released before ready is sent.
	if code := e.httpDoWS(""); code != http.StatusSwitchingProtocols {
		t.Fatalf("after the hello: %d", code)
	}
}

// httpDoWS opens a WebSocket without authenticating and returns the HTTP
// status of the handshake (101 when upgraded).
func (e *env) httpDoWS(token string) int {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	opts := &websocket.DialOptions{Subprotocols: []string{protocol.Subprotocol}}
	if token != "" {
		opts.HTTPHeader = http.Header{"Authorization": {"Bearer " + token}}
	}
	c, resp, err := websocket.Dial(ctx, e.wsURL(), opts)
	if err == nil {
		_ = c.CloseNow()
		return http.StatusSwitchingProtocols
	}
	if resp == nil {
		e.t.Fatalf("dial: %v", err)
	}
	return resp.StatusCode
}

func TestHTTPRateLimitPerUser(t *testing.T) {
	e := newEnv(t, envOpts{limits: Limits{HTTPRate: 1.0 / 3600, HTTPBurst: 2}})
	path := "/v1/workspaces/" + testWS + "/sessions"
	for range 2 {
		if code := e.httpDo("GET", path, e.member, nil, nil); code != 200 {
			t.Fatalf("within the burst: %d", code)
		}
	}
	var eb errBody
	if code := e.httpDo("GET", path, e.member, nil, &eb); code != http.StatusTooManyRequests ||
		eb.Error.Code != protocol.CodeRateLimited || eb.Error.Reason != "request_rate" || !eb.Error.Retryable {
		t.Fatalf("over the rate: %d %+v", code, eb)
	}
	if code := e.httpDo("GET", path, e.viewer, nil, nil); code != 200 {
		t.Fatalf("another user: %d", code)
	}
}

func TestContentAndBodyLimits(t *testing.T) {
	e := newEnv(t, envOpts{limits: Limits{MaxPromptBytes: 1000, MaxBodyBytes: 4096}})
	cl := e.dial(e.member, false)
	sess := createSession(t, cl)
	base := "/v1/workspaces/" + testWS
	over := []map[string]any{
		{"text": strings.Repeat("a", 1001)},
		{"text": strings.Repeat("a", 600), "displayText": strings.Repeat("b", 401)},
		{"text": "short", "quotes": []map[string]any{{"text": strings.Repeat("q", 996)}}},
	}
	for i, content := range over {
		f := cl.request("turn.message.submit", map[string]any{"workspace": testWS, "sessionId": sess.ID,
			"clientSubmitId": "big-" + string(rune('a'+i)), "content": content})
		if f.OK || f.Error.Code != protocol.CodeInvalidInput || f.Error.Reason != "content_too_large" {
			t.Errorf("WS content %d: %s", i, f.raw)
		}
		f = cl.request("session.create", map[string]any{"workspace": testWS, "content": content})
		if f.OK || f.Error.Reason != "content_too_large" {
			t.Errorf("WS create %d: %s", i, f.raw)
		}
		var eb errBody
		if code := e.httpDo("POST", base+"/sessions/"+sess.ID+"/messages", e.member,
			map[string]any{"clientSubmitId": "big-http", "content": content}, &eb); code != 400 || eb.Error.Reason != "content_too_large" {
			t.Errorf("HTTP content %d: %d %+v", i, code, eb)
		}
	}
	var eb errBody
	if code := e.httpDo("POST", base+"/sessions", e.member, map[string]any{"title": strings.Repeat("t", 5000)}, &eb); code != 400 ||
		eb.Error.Reason != "body_too_large" {
		t.Errorf("body: %d %+v", code, eb)
	}
	f := cl.request("session.create", map[string]any{"workspace": testWS, "settings": map[string]string{"k": strings.Repeat("v", 4097)}})
	if f.OK || f.Error.Reason != "setting_too_large" {
		t.Errorf("settings: %s", f.raw)
	}
	var turns protocol.TurnPage
	cl.must("turn.list", map[string]any{"workspace": testWS, "sessionId": sess.ID}, &turns)
	var list protocol.SessionPage
	cl.must("session.list", map[string]any{"workspace": testWS}, &list)
	if len(turns.Turns) != 0 || len(list.Sessions) != 1 {
		t.Fatalf("a refused input changed state: %d turns, %d sessions", len(turns.Turns), len(list.Sessions))
	}
	// At the limit is accepted.
	var sr host.SendResult
	cl.must("turn.message.submit", map[string]any{"workspace": testWS, "sessionId": sess.ID, "clientSubmitId": "fits",
		"content": map[string]any{"text": "/sim words=2\n" + strings.Repeat("a", 1000-len("/sim words=2\n"))}}, &sr)
}

func TestOriginAllowlist(t *testing.T) {
	e := newEnv(t, envOpts{origins: []string{"app.example.com", "https://*.trusted.example"}})
	dial := func(origin string) (int, errBody) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		h := http.Header{"Authorization": {"Bearer " + e.member}}
		if origin != "" {
			h.Set("Origin", origin)
		}
		c, resp, err := websocket.Dial(ctx, e.wsURL(), &websocket.DialOptions{Subprotocols: []string{protocol.Subprotocol}, HTTPHeader: h})
		if err == nil {
			_ = c.CloseNow()
			return 101, errBody{}
		}
		var eb errBody
		b, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(b, &eb)
		return resp.StatusCode, eb
	}
	for origin, want := range map[string]int{
		"":                              101, // not a browser
		e.ts.URL:                        101, // same origin
		"https://app.example.com":       101,
		"http://app.example.com":        101, // host patterns match any scheme
		"https://ci.trusted.example":    101,
		"http://ci.trusted.example":     403, // scheme patterns do not
		"https://evil.example":          403,
		"https://app.example.com.evil":  403,
		"null":                          403,
		"https://APP.EXAMPLE.COM":       101,
		"https://evil.app.example.com":  403,
		"https://ci.trusted.example:81": 403,
	} {
		code, eb := dial(origin)
		if code != want {
			t.Errorf("origin %q: %d, want %d", origin, code, want)
		}
		if want == 403 && (eb.Error.Code != protocol.CodeForbidden || eb.Error.Reason != "origin_not_allowed") {
			t.Errorf("origin %q: body %+v", origin, eb.Error)
		}
	}
}

// syncBuffer is a log sink safe for concurrent handlers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Every token used against the server — accepted, refused, refreshed, by
// header, hello or auth.refresh — is absent from everything the server,
// the Host, the hub and the runtime logged at debug level.
func TestTokensNeverLogged(t *testing.T) {
	var logs syncBuffer
	i := newIDP(t)
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e := newEnv(t, envOpts{verifier: i.verifier(t), logger: log})

	good := i.token("alice", map[string]string{testWS: "member"})
	refreshed := i.token("alice", map[string]string{testWS: "member"})
	claims := idClaims("alice", map[string]string{testWS: "member"}, time.Hour)
	expired := i.key.Sign(with(claims, "exp", time.Now().Add(-time.Hour).Unix()))
	forged := authtest.Tamper(good)
	confused := authtest.HMACConfusion(i.key, claims)
	unknownKID := authtest.NewRSA("nobody").Sign(claims)
	hs := authtest.SignHMAC(jwt.SigningMethodHS512, testSecret, jwt.MapClaims{"sub": "bob", "exp": time.Now().Add(time.Hour).Unix(),
		"iss": testIssuer, "aud": testAudience, "workspaces": map[string]any{testWS: "admin"}})
	tokens := []string{good, refreshed, expired, forged, confused, unknownKID, hs, "garbage-token-that-is-long-enough"}

	cl := e.dial(good, false)
	createSession(t, cl)
	cl.must("auth.refresh", map[string]any{"token": refreshed}, nil)
	for _, bad := range []string{expired, forged, confused, unknownKID} {
		cl.request("auth.refresh", map[string]any{"token": bad})
		e.httpDo("GET", "/v1/workspaces/"+testWS+"/sessions", bad, nil, nil)
		e.httpDoWS(bad)
		h := e.dialRaw(bad, true)
		h.closeStatus(5 * time.Second)
	}
	e.httpDo("GET", "/v1/workspaces/"+testWS+"/sessions", "garbage-token-that-is-long-enough", nil, nil)
	e.dial(hs, true).request("session.list", map[string]any{"workspace": testWS})
	if code := e.httpDo("GET", "/v1/workspaces/"+testWS+"/sessions", hs, nil, nil); code != 200 {
		t.Fatalf("HS512: %d", code)
	}

	out := logs.String()
	if n := strings.Count(out, "authentication failed"); n < 12 {
		t.Fatalf("want the refusals logged (the capture works), found %d lines:\n%s", n, out)
	}
	for _, tok := range tokens {
		parts := append([]string{tok}, strings.Split(tok, ".")...)
		for _, p := range parts {
			if len(p) >= 16 && strings.Contains(out, p) && !strings.HasPrefix(tok, p) {
				t.Errorf("a token part is in the log: %q", p)
			}
			if p == tok && strings.Contains(out, p) {
				t.Errorf("a token is in the log: %q", p)
			}
		}
	}
}

// encoding/json matches keys regardless of case; inputs must not.
func TestInputKeysAreCaseSensitive(t *testing.T) {
	e := newEnv(t, envOpts{})
	cl := e.dial(e.member, false)
	sess := createSession(t, cl)
	other := createSession(t, cl)
	var eb errBody
	// Without the check, "sessionid" would win over the path's sessionId.
	if code := e.httpDo("POST", "/v1/workspaces/"+testWS+"/sessions/"+sess.ID+"/messages", e.member,
		map[string]any{"sessionid": other.ID, "clientSubmitId": "case", "content": map[string]any{"text": "hi"}}, &eb); code != 400 ||
		eb.Error.Code != protocol.CodeInvalidInput {
		t.Fatalf("case-folded body key: %d %+v", code, eb)
	}
	for _, in := range []map[string]any{
		{"Workspace": testWS},
		{"workspace": testWS, "sessionId": sess.ID, "clientSubmitId": "c", "content": map[string]any{"Text": "hi"}},
		{"workspace": testWS, "sessionId": sess.ID, "clientSubmitId": "c", "content": map[string]any{"text": "hi", "quotes": []any{map[string]any{"TEXT": "q"}}}},
	} {
		op := "session.list"
		if _, ok := in["sessionId"]; ok {
			op = "turn.message.submit"
		}
		if f := cl.request(op, in); f.OK || f.Error.Code != protocol.CodeInvalidInput {
			t.Errorf("%v: %s", in, f.raw)
		}
	}
	var turns protocol.TurnPage
	cl.must("turn.list", map[string]any{"workspace": testWS, "sessionId": other.ID}, &turns)
	if len(turns.Turns) != 0 {
		t.Fatal("a refused input started a turn")
	}
}
