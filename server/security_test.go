package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
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

// The security tests run the real server (SQLite, the sim agent over ACP,
// the hub) with the production verifier: the HS256 test secret plus an
// identity provider publishing an RSA key over a JWKS endpoint, with an
// issuer and an audience to check.

const (
	wsA          = "wa"
	wsB          = "wb"
	testIssuer   = "https://idp.test/"
	testAudience = "ensemble"
)

type idp struct {
	key  *authtest.Key
	jwks *authtest.JWKS
}

func newIDP(t *testing.T) *idp {
	t.Helper()
	k := authtest.NewRSA("idp-2025")
	j := authtest.NewJWKS(k)
	t.Cleanup(j.Close)
	return &idp{key: k, jwks: j}
}

func (i *idp) verifier(t *testing.T) *auth.JWT {
	t.Helper()
	v, err := auth.New(t.Context(), testSecret, auth.Options{Issuer: testIssuer, Audience: testAudience,
		JWKSURL: i.jwks.URL, JWKSUnknownKIDInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func idClaims(sub string, ws map[string]string, ttl time.Duration) jwt.MapClaims {
	now := time.Now()
	m := map[string]any{}
	for k, v := range ws {
		m[k] = v
	}
	return jwt.MapClaims{"sub": sub, "name": sub, "iss": testIssuer, "aud": testAudience,
		"iat": now.Unix(), "exp": now.Add(ttl).Unix(), "workspaces": m}
}

func (i *idp) token(sub string, ws map[string]string) string {
	return i.key.Sign(idClaims(sub, ws, time.Hour))
}

func with(c jwt.MapClaims, k string, v any) jwt.MapClaims {
	out := maps.Clone(c)
	out[k] = v
	return out
}

// tenant is one workspace's fixture: an idle session with a settled turn
// and a busy session whose turn hangs until cancelled (so a cancel or an
// interrupt that reached it would change it).
type tenant struct {
	ws               string
	idle, idleTurn   string
	busy, busyTurn   string
	submitID, prompt string // the idle session's creation
	nextID, next     string // its second turn
	idleSub          string
}

func seedTenant(t *testing.T, e *env, owner *client, ws string) tenant {
	t.Helper()
	tn := tenant{ws: ws, submitID: "seed-" + ws, prompt: "/sim words=3\nhello from " + ws,
		nextID: "next-" + ws, next: "/sim words=2\nmore from " + ws}
	var cr protocol.CreateSessionResult
	owner.must("session.create", map[string]any{"workspace": ws, "title": "idle", "clientSubmitId": tn.submitID,
		"content": map[string]any{"text": tn.prompt}}, &cr)
	tn.idle, tn.idleTurn = cr.Session.ID, cr.Turn.ID
	waitTurnSettled(t, e, ws, tn.idle, tn.idleTurn)
	var sr host.SendResult
	owner.must("turn.message.submit", map[string]any{"workspace": ws, "sessionId": tn.idle, "clientSubmitId": tn.nextID,
		"content": map[string]any{"text": tn.next}}, &sr)
	tn.idleTurn = sr.Turn.ID
	waitTurnSettled(t, e, ws, tn.idle, tn.idleTurn)
	owner.must("session.create", map[string]any{"workspace": ws, "title": "busy", "clientSubmitId": "seed-busy-" + ws,
		"content": map[string]any{"text": "/sim hang\nwait for me"}}, &cr)
	tn.busy, tn.busyTurn = cr.Session.ID, cr.Turn.ID
	tn.idleSub = "session:" + ws + "/" + tn.idle
	t.Cleanup(func() {
		_, _ = e.host.CancelTurn(context.Background(), host.CancelInput{WorkspaceID: ws, SessionID: tn.busy, TurnID: tn.busyTurn, Wait: 5 * time.Second})
	})
	return tn
}

func waitTurnSettled(t *testing.T, e *env, ws, sid, tid string) {
	t.Helper()
	waitFor(t, func() bool {
		tr, err := e.host.GetTurn(context.Background(), ws, sid, tid)
		return err == nil && tr.Settled()
	})
}

// canonicalState reads every session, turn and message of both workspaces
// through the Host, as JSON.
func canonicalState(t *testing.T, e *env) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	for _, ws := range []string{wsA, wsB} {
		sp, err := e.host.ListSessions(ctx, ws, host.SessionQuery{Limit: 200})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range sp.Sessions {
			tp, err := e.host.ListSessionTurns(ctx, ws, s.ID, host.TurnQuery{Limit: 200})
			if err != nil {
				t.Fatal(err)
			}
			mp, err := e.host.ListSessionMessages(ctx, ws, s.ID, host.MessageQuery{Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			g, err := e.host.GetGoal(ctx, ws, s.ID)
			if err != nil {
				t.Fatal(err)
			}
			j, _ := json.Marshal([]any{s, tp, mp, g})
			b.Write(j)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// stableState waits until the hung turns have streamed their one line and
// two reads agree.
func stableState(t *testing.T, e *env) string {
	t.Helper()
	prev := canonicalState(t, e)
	for range 200 {
		time.Sleep(25 * time.Millisecond)
		cur := canonicalState(t, e)
		if cur == prev && strings.Contains(cur, "Now hanging") {
			return cur
		}
		prev = cur
	}
	t.Fatal("canonical state did not settle")
	return ""
}

// opInput is the input of op in workspace ws, naming tn's ids.
func opInput(op, ws string, tn tenant) map[string]any {
	in := map[string]any{"workspace": ws}
	switch op {
	case "session.create":
		in["clientSubmitId"], in["content"] = tn.submitID, map[string]any{"text": tn.prompt}
	case "session.list", "session.listDeleted":
	case "session.update":
		in["sessionId"], in["title"], in["pinned"] = tn.idle, "pwned", true
	case "turn.message.submit":
		in["sessionId"], in["clientSubmitId"], in["content"] = tn.idle, tn.nextID, map[string]any{"text": tn.next}
	case "turn.cancel":
		in["sessionId"], in["turnId"], in["wait"] = tn.busy, tn.busyTurn, 0
	case "turn.interrupt":
		in["sessionId"], in["turnId"] = tn.busy, tn.busyTurn
	case "queue.retract":
		in["sessionId"], in["entryId"] = tn.busy, "qe-of-"+tn.ws
	case "interaction.respond":
		in["sessionId"], in["turnId"], in["requestId"], in["response"] = tn.busy, tn.busyTurn, "perm-1", map[string]any{"optionId": "allow"}
	case "subscribe":
		in["topic"], in["sessionId"] = "session", tn.idle
	case "unsubscribe":
		in["sub"] = tn.idleSub
	case "presence.typing":
		in["sessionId"], in["typing"] = tn.idle, true
	case "session.fork":
		in["sessionId"], in["turnId"], in["clientSubmitId"] = tn.idle, tn.idleTurn, "fork-"+tn.submitID
	case "session.import":
		// Not a graph: an admin gets past authorization to the document
		// check; everyone else must stop at forbidden.
		in["graph"] = map[string]any{}
	case "goal.control":
		in["sessionId"], in["clientSubmitId"], in["action"], in["goal"] = tn.idle, "goal-"+tn.nextID, "set", map[string]any{"objective": "take over"}
	default: // session.get, delete, restore, purge; turn.list, message.list; goal.get
		in["sessionId"] = tn.idle
	}
	return in
}

var pathParams = []string{"workspace", "sessionId", "turnId", "requestId"}

// httpRequest maps an operation input onto its REST route.
func httpRequest(op string, in map[string]any) (method, path string, body map[string]any, okStatus int, ok bool) {
	for _, rt := range restTable {
		if rt.op != op {
			continue
		}
		path = "/v1/workspaces/{workspace}" + rt.path
		body = map[string]any{}
		for k, v := range in {
			if slices.Contains(pathParams, k) && strings.Contains(path, "{"+k+"}") {
				path = strings.ReplaceAll(path, "{"+k+"}", url.PathEscape(fmt.Sprint(v)))
				continue
			}
			body[k] = v
		}
		if rt.method == http.MethodGet {
			q := url.Values{}
			for k, v := range body {
				q.Set(k, fmt.Sprint(v))
			}
			if len(q) > 0 {
				path += "?" + q.Encode()
			}
			body = nil
		}
		return rt.method, path, body, rt.okStatus, true
	}
	return "", "", nil, 0, false
}

// closedWithout waits for the server to close cl, failing on any frame
// that arrives meanwhile.
func closedWithout(t *testing.T, cl *client, label string) websocket.StatusCode {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case f, ok := <-cl.frames:
			if !ok {
				return websocket.CloseStatus(cl.err)
			}
			t.Errorf("%s: unexpected frame %s", label, f.raw)
		case <-deadline:
			t.Fatalf("%s: connection still open", label)
		}
	}
}

// want is the documented answer: ok, or an error code (and reason).
type want struct {
	code   protocol.Code // "" = ok
	reason string
}

func (w want) String() string {
	if w.code == "" {
		return "ok"
	}
	return string(w.code) + "/" + w.reason
}

func implemented(op string) bool { _, ok := ops[op]; return ok }

func checkHTTP(t *testing.T, e *env, label, token, op string, in map[string]any, w want) json.RawMessage {
	t.Helper()
	method, path, body, okStatus, ok := httpRequest(op, in)
	if !ok {
		return nil
	}
	var raw json.RawMessage
	var b any
	if body != nil {
		b = body
	}
	status := e.httpDo(method, path, token, b, &raw)
	var eb errBody
	_ = json.Unmarshal(raw, &eb)
	wantStatus := okStatus
	if w.code != "" {
		wantStatus = w.code.HTTPStatus()
	}
	if status != wantStatus || eb.Error.Code != w.code || (w.code != "" && (eb.Error.Retryable != w.code.Retryable() || eb.Error.Reason != w.reason)) {
		t.Errorf("%s: HTTP %s %s: %d %s, want %d %v", label, method, path, status, raw, wantStatus, w)
	}
	return raw
}

func checkWS(t *testing.T, cl *client, label, op string, in map[string]any, w want) frame {
	t.Helper()
	f := cl.request(op, in)
	switch {
	case w.code == "" && !f.OK:
		t.Errorf("%s: WS %s: %s, want ok", label, op, f.raw)
	case w.code != "" && (f.OK || f.Error.Code != w.code || f.Error.Reason != w.reason || f.Error.Retryable != w.code.Retryable()):
		t.Errorf("%s: WS %s: %s, want %v", label, op, f.raw, w)
	}
	return f
}

// TestEveryOperationRefusesHostileCallers calls every operation the
// protocol defines, over HTTP and over the WebSocket, as each kind of
// hostile or under-privileged caller, and checks the documented answer and
// that canonical state did not change.
func TestEveryOperationRefusesHostileCallers(t *testing.T) {
	i := newIDP(t)
	e := newEnv(t, envOpts{verifier: i.verifier(t)})
	owner := e.dial(i.token("owner", map[string]string{wsA: "admin", wsB: "admin"}), false)
	A, B := seedTenant(t, e, owner, wsA), seedTenant(t, e, owner, wsB)
	state := stableState(t, e)
	unchanged := func(label string) {
		t.Helper()
		if got := canonicalState(t, e); got != state {
			t.Fatalf("%s changed canonical state:\nbefore:\n%s\nafter:\n%s", label, state, got)
		}
	}
	allOps := auth.Operations()
	slices.Sort(allOps)

	// 1. Tokens that must not authenticate anything.
	now := time.Now()
	good := idClaims("mallory", map[string]string{wsA: "admin", wsB: "admin"}, time.Hour)
	bad := []struct{ name, tok, reason string }{
		{"no token", "", ""},
		{"bad signature", authtest.Tamper(i.key.Sign(good)), ""},
		{"alg none", authtest.AlgNone(good), ""},
		{"HS/RS key confusion", authtest.HMACConfusion(i.key, good), ""},
		{"expired", i.key.Sign(with(good, "exp", now.Add(-time.Hour).Unix())), "token_expired"},
		{"wrong audience", i.key.Sign(with(good, "aud", "another-api")), ""},
		{"wrong issuer", i.key.Sign(with(good, "iss", "https://evil.test/")), ""},
		{"unknown kid", authtest.NewRSA("idp-2026").Sign(good), ""},
	}
	for _, c := range bad {
		w := want{protocol.CodeUnauthenticated, c.reason}
		for _, op := range allOps {
			label := c.name + " " + op
			checkHTTP(t, e, label, c.tok, op, opInput(op, wsB, B), w)

			// A hello with the token, and the request right behind it:
			// an error frame, close 4501, and the request never runs.
			cl := e.dialRaw(c.tok, true)
			req, _ := json.Marshal(map[string]any{"type": "request", "id": "r1", "op": op, "input": opInput(op, wsB, B)})
			_ = cl.c.Write(context.Background(), websocket.MessageText, req) // may find the socket closed already
			f := cl.next(5 * time.Second)
			if f.Type != "error" || f.Error.Code != w.code || f.Error.Reason != w.reason {
				t.Errorf("%s: first frame %s, want an unauthenticated error", label, f.raw)
			}
			if code := closedWithout(t, cl, label); code != hub.CloseUnauthenticated {
				t.Errorf("%s: close %d, want 4501", label, code)
			}
		}
		// Canonical state is read after each caller's round of every
		// operation over both transports (reading it after each call is
		// the same check, only slower).
		unchanged(c.name)
		if c.tok == "" {
			continue
		}
		// The same token as a Bearer header on the upgrade: 401 before it.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, resp, err := websocket.Dial(ctx, e.wsURL(), &websocket.DialOptions{Subprotocols: []string{protocol.Subprotocol},
			HTTPHeader: http.Header{"Authorization": {"Bearer " + c.tok}}})
		cancel()
		if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: upgrade with a Bearer header: %v %v", c.name, resp, err)
		} else {
			b, _ := io.ReadAll(resp.Body)
			var eb errBody
			if json.Unmarshal(b, &eb) != nil || eb.Error.Code != protocol.CodeUnauthenticated || eb.Error.Reason != c.reason {
				t.Errorf("%s: upgrade body %s", c.name, b)
			}
		}
	}
	if s := e.hub.Stats(); s.Connections != 1 {
		t.Fatalf("refused connections left behind: %d open", s.Connections)
	}

	// 2. Authenticated callers without the right: a viewer of A trying
	// every mutation in A (and reading, which it may), members and admins
	// of A naming B's ids under A, and a member of A naming B.
	type hostileCaller struct {
		name   string
		token  string
		role   auth.Role
		ws     string
		ids    tenant
		expect func(op string, role auth.Role) want
	}
	inOwn := func(op string, role auth.Role) want {
		switch {
		case !auth.Allowed(role, op):
			return want{protocol.CodeForbidden, ""}
		case !implemented(op):
			return want{protocol.CodeUnsupported, ""}
		}
		return want{}
	}
	crossTenant := func(op string, role auth.Role) want {
		switch {
		case !auth.Allowed(role, op):
			return want{protocol.CodeForbidden, ""}
		case op == "session.create", op == "session.list", op == "session.listDeleted", op == "unsubscribe":
			return want{} // creates in A; lists A (or A's trash); drops nothing
		case op == "session.import":
			return want{protocol.CodeInvalidInput, host.ReasonGraphInvalid} // imports only ever write A
		case !implemented(op):
			return want{protocol.CodeUnsupported, ""}
		}
		return want{protocol.CodeNotFound, ""}
	}
	callers := []hostileCaller{
		{"viewer of A", i.token("victor", map[string]string{wsA: "viewer"}), auth.RoleViewer, wsA, A, inOwn},
		{"member of A naming B's ids", i.token("mia", map[string]string{wsA: "member"}), auth.RoleMember, wsA, B, crossTenant},
		{"admin of A naming B's ids", i.token("adam", map[string]string{wsA: "admin"}), auth.RoleAdmin, wsA, B, crossTenant},
		{"member of A naming B", i.token("mia", map[string]string{wsA: "member"}), auth.RoleNone, wsB, B,
			func(string, auth.Role) want { return want{protocol.CodeForbidden, ""} }},
	}
	for _, c := range callers {
		cl := e.dial(c.token, c.name == "member of A naming B")
		for _, op := range allOps {
			w := c.expect(op, c.role)
			in := opInput(op, c.ws, c.ids)
			label := c.name + " " + op
			create := op == "session.create" && w.code == ""
			if create {
				unchanged(c.name + " before " + op) // it changes A
			}
			raw := checkHTTP(t, e, label, c.token, op, in, w)
			f := checkWS(t, cl, label, op, in, w)
			// Nothing of B comes back but what the caller named itself.
			asked, _ := json.Marshal(in)
			for _, body := range []string{string(raw), string(f.raw)} {
				for _, secret := range []string{B.idle, B.idleTurn, B.busy, B.busyTurn, "more from wb", "Now hanging"} {
					if c.ids.ws == wsB && !strings.Contains(string(asked), secret) && strings.Contains(body, secret) {
						t.Errorf("%s: the answer reveals %q of B: %s", label, secret, body)
					}
				}
			}
			if create {
				// Created in A under B's clientSubmitId and content: a new
				// session of A, never B's replayed.
				var res protocol.CreateSessionResult
				mustJSON(t, f.Result, &res)
				if res.Session.WorkspaceID != wsA || res.Session.ID == B.idle || res.Turn == nil {
					t.Fatalf("%s: %s", label, f.raw)
				}
				waitTurnSettled(t, e, wsA, res.Session.ID, res.Turn.ID)
				state = stableState(t, e)
				continue
			}
			if op == "unsubscribe" && w.code == "" && strings.Contains(string(f.Result), "true") && c.ids.ws == wsB {
				t.Errorf("%s: dropped a subscription it never had: %s", label, f.raw)
			}
		}
		unchanged(c.name)
	}

	// The tenant fixtures are untouched, and the busy turns still run.
	for _, tn := range []tenant{A, B} {
		tr, err := e.host.GetTurn(context.Background(), tn.ws, tn.busy, tn.busyTurn)
		if err != nil || tr.Settled() || tr.CancelRequested {
			t.Fatalf("busy turn of %s: %+v %v", tn.ws, tr, err)
		}
	}
}

// Each operation authorizes under the name it is dispatched by, and every
// dispatched name is in the permission table.
func TestOpsAuthorizeUnderTheirOwnNames(t *testing.T) {
	for name, fn := range ops {
		if fn.name != name || !auth.KnownOperation(name) {
			t.Errorf("ops[%q] authorizes as %q (in the permission table: %v)", name, fn.name, auth.KnownOperation(name))
		}
	}
}
