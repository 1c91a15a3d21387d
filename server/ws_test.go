package server

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/ensemble-dev/ensemble/auth"
	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/hub"
	"github.com/ensemble-dev/ensemble/protocol"
)

type subResult struct {
	Sub       string                    `json:"sub"`
	Epoch     string                    `json:"epoch"`
	Seq       int64                     `json:"seq"`
	Recovered bool                      `json:"recovered"`
	Snapshot  *protocol.SessionSnapshot `json:"snapshot"`
}

func createSession(t *testing.T, cl *client) protocol.Session {
	t.Helper()
	var res protocol.CreateSessionResult
	cl.must("session.create", map[string]any{"workspace": testWS, "title": "pairing"}, &res)
	return res.Session
}

func subscribeSession(t *testing.T, cl *client, sid string, resume *protocol.Resume) subResult {
	t.Helper()
	in := map[string]any{"workspace": testWS, "topic": "session", "sessionId": sid}
	if resume != nil {
		in["resume"] = resume
	}
	var res subResult
	cl.must("subscribe", in, &res)
	return res
}

// transcript rebuilds message texts from a snapshot and events, the way a
// client does, and checks every delta lands exactly at the end.
type transcript struct {
	t     *testing.T
	texts map[string][]uint16
	turns map[string]protocol.Turn
}

func newTranscript(t *testing.T, snap *protocol.SessionSnapshot) *transcript {
	tr := &transcript{t: t, texts: map[string][]uint16{}, turns: map[string]protocol.Turn{}}
	if snap != nil {
		for _, m := range snap.Messages {
			tr.texts[m.ID] = utf16.Encode([]rune(m.Content.Text))
		}
		for _, x := range snap.Turns {
			tr.turns[x.ID] = x
		}
	}
	return tr
}

func (tr *transcript) apply(f frame) {
	tr.t.Helper()
	switch f.Kind {
	case protocol.KindMessageUpdate:
		var p protocol.MessageUpdate
		mustJSON(tr.t, f.Payload, &p)
		tr.texts[p.Message.ID] = utf16.Encode([]rune(p.Message.Content.Text))
	case protocol.KindMessageDelta:
		var p protocol.MessageDelta
		mustJSON(tr.t, f.Payload, &p)
		cur := tr.texts[p.MessageID]
		if p.Offset != len(cur) {
			tr.t.Fatalf("delta for %s at offset %d, client has %d units", p.MessageID, p.Offset, len(cur))
		}
		tr.texts[p.MessageID] = append(cur, utf16.Encode([]rune(p.Text))...)
	case protocol.KindTurnUpdate:
		var p protocol.TurnUpdate
		mustJSON(tr.t, f.Payload, &p)
		tr.turns[p.Turn.ID] = p.Turn
	}
}

func (tr *transcript) text(id string) string { return string(utf16.Decode(tr.texts[id])) }

func mustJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
}

// collectUntilSettled gathers a subscription's events until the turn is
// settled, checking seq is gap-free from `from`.
func collectUntilSettled(t *testing.T, cl *client, sub string, from int64, turnID string) []frame {
	t.Helper()
	var out []frame
	seq := from
	for {
		f := cl.nextEvent(20 * time.Second)
		if f.Sub != sub {
			continue
		}
		if f.Seq != seq+1 {
			t.Fatalf("seq gap: after %d got %d", seq, f.Seq)
		}
		seq = f.Seq
		out = append(out, f)
		if f.Kind == protocol.KindTurnUpdate {
			var p protocol.TurnUpdate
			mustJSON(t, f.Payload, &p)
			if p.Turn.ID == turnID && (p.Turn.Phase == host.PhaseSettled) {
				return out
			}
		}
	}
}

func agentText(t *testing.T, e *env, sid string) (string, string) {
	t.Helper()
	p, err := e.host.ListSessionMessages(context.Background(), testWS, sid, host.MessageQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range p.Messages {
		if m.Role == host.RoleAgent && m.Kind == host.KindText {
			return m.ID, m.Content.Text
		}
	}
	t.Fatalf("no agent text message in %+v", p.Messages)
	return "", ""
}

func TestTwoWatchersSeeTheSameEvents(t *testing.T) {
	e := newEnv(t, envOpts{})
	a, b := e.dial(e.member, false), e.dial(e.member, true)
	sess := createSession(t, a)
	ra := subscribeSession(t, a, sess.ID, nil)
	rb := subscribeSession(t, b, sess.ID, nil)
	// B subscribed a moment later: A may already have seen B arrive (a
	// presence event), so B's stream starts at or after A's.
	if ra.Sub != rb.Sub || ra.Epoch != rb.Epoch || rb.Seq < ra.Seq {
		t.Fatalf("subscriptions differ: %+v vs %+v", ra, rb)
	}
	if ra.Snapshot == nil || ra.Snapshot.Session.ID != sess.ID || ra.Recovered {
		t.Fatalf("bad snapshot: %+v", ra)
	}

	var sr host.SendResult
	a.must("turn.message.submit", map[string]any{"workspace": testWS, "sessionId": sess.ID,
		"clientSubmitId": "cs-1", "content": map[string]any{"text": "/sim words=40 rate=1ms\nexplain pairing"}}, &sr)
	if sr.Disposition != host.DispositionTurnStarted || sr.Turn == nil {
		t.Fatalf("submit: %+v", sr)
	}

	evA := collectUntilSettled(t, a, ra.Sub, ra.Seq, sr.Turn.ID)
	evB := collectUntilSettled(t, b, rb.Sub, rb.Seq, sr.Turn.ID)
	for len(evA) > 0 && evA[0].Seq <= rb.Seq { // from before B was there
		evA = evA[1:]
	}
	if len(evA) != len(evB) {
		t.Fatalf("A saw %d events, B %d", len(evA), len(evB))
	}
	kinds := map[string]int{}
	for i := range evA {
		if !bytes.Equal(evA[i].raw, evB[i].raw) {
			t.Fatalf("event %d differs:\n%s\n%s", i, evA[i].raw, evB[i].raw)
		}
		kinds[evA[i].Kind]++
	}
	if kinds[protocol.KindMessageUpdate] == 0 || kinds[protocol.KindTurnUpdate] == 0 || kinds[protocol.KindSessionSummary] == 0 {
		t.Fatalf("kinds seen: %v", kinds)
	}

	tr := newTranscript(t, ra.Snapshot)
	for _, f := range evA {
		tr.apply(f)
	}
	if got := tr.turns[sr.Turn.ID]; got.Outcome != host.OutcomeCompleted {
		t.Fatalf("turn ended %s/%s", got.Phase, got.Outcome)
	}
	id, want := agentText(t, e, sess.ID)
	if got := tr.text(id); got != want || want == "" {
		t.Fatalf("rebuilt text differs:\n got %q\nwant %q", got, want)
	}
	t.Logf("events: %v, rereads: %d", kinds, e.hub.Stats().Rereads)
}

func TestRetriedSubmitAfterDroppedResponse(t *testing.T) {
	e := newEnv(t, envOpts{})
	a := e.dial(e.member, false)
	sess := createSession(t, a)
	req := map[string]any{"type": "request", "id": "submit-1", "op": "turn.message.submit", "input": map[string]any{
		"workspace": testWS, "sessionId": sess.ID, "clientSubmitId": "retry-me",
		"content": map[string]any{"text": "/sim words=5\nhello"}}}
	a.send(req)
	_ = a.c.CloseNow() // the response is lost with the connection

	b := e.dial(e.member, true)
	b.send(req)
	f := b.await("submit-1")
	if !f.OK {
		t.Fatalf("retry failed: %s", f.raw)
	}
	var sr host.SendResult
	mustJSON(t, f.Result, &sr)
	e.waitSettled(sess.ID, sr.Turn.ID)

	// And once more, on a settled turn: the same turn, replayed.
	b.send(req)
	f = b.await("submit-1")
	var again host.SendResult
	mustJSON(t, f.Result, &again)
	if !f.OK || again.Turn.ID != sr.Turn.ID || !again.Replayed {
		t.Fatalf("second retry: %s", f.raw)
	}

	var turns protocol.TurnPage
	b.must("turn.list", map[string]any{"workspace": testWS, "sessionId": sess.ID}, &turns)
	if len(turns.Turns) != 1 || turns.Turns[0].ID != sr.Turn.ID {
		t.Fatalf("want exactly one turn, got %+v", turns.Turns)
	}
	var msgs protocol.MessagePage
	b.must("message.list", map[string]any{"workspace": testWS, "sessionId": sess.ID}, &msgs)
	users := 0
	for _, m := range msgs.Messages {
		if m.Role == host.RoleUser {
			users++
		}
	}
	if users != 1 {
		t.Fatalf("want one user message, got %d", users)
	}
}

func TestResume(t *testing.T) {
	e := newEnv(t, envOpts{})
	a := e.dial(e.member, false)
	sess := createSession(t, a)
	first := subscribeSession(t, a, sess.ID, nil)
	_ = a.c.CloseNow()
	<-a.closed

	// Work happens while the watcher is away.
	var sr host.SendResult
	if code := e.httpDo("POST", "/v1/workspaces/"+testWS+"/sessions/"+sess.ID+"/messages", e.member,
		map[string]any{"clientSubmitId": "away", "content": map[string]any{"text": "/sim words=10\nwhile you were out"}}, &sr); code != 200 {
		t.Fatalf("submit: %d", code)
	}
	e.waitSettled(sess.ID, sr.Turn.ID)
	waitFor(t, func() bool { // the hub has caught up with the settled turn
		b := e.dial(e.member, false)
		defer b.c.CloseNow()
		r := subscribeSession(t, b, sess.ID, nil)
		for _, x := range r.Snapshot.Turns {
			if x.ID == sr.Turn.ID && (x.Phase == host.PhaseSettled) {
				return true
			}
		}
		return false
	})

	b := e.dial(e.member, true)
	res := subscribeSession(t, b, sess.ID, &protocol.Resume{Epoch: first.Epoch, Seq: first.Seq})
	if !res.Recovered || res.Snapshot != nil || res.Seq != first.Seq || res.Sub != first.Sub {
		t.Fatalf("want recovered without snapshot, got %+v", res)
	}
	evs := collectUntilSettled(t, b, res.Sub, first.Seq, sr.Turn.ID)
	tr := newTranscript(t, first.Snapshot)
	for _, f := range evs {
		tr.apply(f)
	}
	id, want := agentText(t, e, sess.ID)
	if tr.text(id) != want {
		t.Fatalf("replayed text %q, want %q", tr.text(id), want)
	}

	// A wrong epoch gets a full snapshot instead.
	c := e.dial(e.member, false)
	res = subscribeSession(t, c, sess.ID, &protocol.Resume{Epoch: "hub_elsewhere.1", Seq: first.Seq})
	if res.Recovered || res.Snapshot == nil {
		t.Fatalf("wrong epoch: %+v", res)
	}
	snap := res.Snapshot
	if snap.Session.ID != sess.ID || len(snap.Turns) != 1 || !(snap.Turns[0].Phase == host.PhaseSettled) || len(snap.Messages) < 2 {
		t.Fatalf("snapshot incomplete: %+v", snap)
	}
	// A seq from the future is not recoverable either.
	res = subscribeSession(t, c, sess.ID, &protocol.Resume{Epoch: first.Epoch, Seq: 1 << 40})
	if res.Recovered || res.Snapshot == nil {
		t.Fatalf("future seq: %+v", res)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("condition not met")
}

func TestWorkspaceTopic(t *testing.T) {
	e := newEnv(t, envOpts{})
	a := e.dial(e.member, false)
	existing := createSession(t, a)
	var res struct {
		Sub      string                      `json:"sub"`
		Seq      int64                       `json:"seq"`
		Snapshot *protocol.WorkspaceSnapshot `json:"snapshot"`
	}
	a.must("subscribe", map[string]any{"workspace": testWS, "topic": "workspace"}, &res)
	if res.Snapshot == nil || len(res.Snapshot.Sessions) != 1 || res.Snapshot.Sessions[0].ID != existing.ID {
		t.Fatalf("snapshot: %+v", res.Snapshot)
	}
	var upd struct{ Session host.Session }
	a.must("session.update", map[string]any{"workspace": testWS, "sessionId": existing.ID, "title": "renamed", "pinned": true}, &upd)
	for {
		f := a.nextEvent(10 * time.Second)
		if f.Sub != res.Sub || f.Kind != protocol.KindSessionSummary {
			continue
		}
		if f.Seq <= res.Seq {
			t.Fatalf("old seq %d", f.Seq)
		}
		var p protocol.SessionSummary
		mustJSON(t, f.Payload, &p)
		if p.Session.Title == "renamed" && p.Session.Pinned {
			break
		}
	}
	var un struct{ Unsubscribed bool }
	a.must("unsubscribe", map[string]any{"workspace": testWS, "sub": res.Sub}, &un)
	if !un.Unsubscribed {
		t.Fatal("unsubscribe reported false")
	}
}

func TestAuthFailures(t *testing.T) {
	e := newEnv(t, envOpts{})

	// Bad token in a hello frame: an error frame, then close 4501.
	cl := e.dialRaw("not-a-jwt", true)
	f := cl.next(5 * time.Second)
	if f.Type != "error" || f.Error == nil || f.Error.Code != protocol.CodeUnauthenticated {
		t.Fatalf("want unauthenticated error frame, got %s", f.raw)
	}
	if code := cl.closeStatus(5 * time.Second); code != hub.CloseUnauthenticated {
		t.Fatalf("close %d", code)
	}

	// Expired token in a hello frame (beyond the 30 s leeway).
	cl = e.dialRaw(e.tokenExpired(), true)
	f = cl.next(5 * time.Second)
	if f.Error == nil || f.Error.Reason != "token_expired" {
		t.Fatalf("want token_expired, got %s", f.raw)
	}
	if code := cl.closeStatus(5 * time.Second); code != hub.CloseUnauthenticated {
		t.Fatalf("close %d", code)
	}

	// No hello at all within the timeout.
	old := helloTimeout
	helloTimeout = 200 * time.Millisecond
	defer func() { helloTimeout = old }()
	cl = e.dialRaw("", true)
	if code := cl.closeStatus(5 * time.Second); code != hub.CloseUnauthenticated {
		t.Fatalf("hello timeout close %d", code)
	}

	// A first frame that is not a hello is a protocol violation.
	helloTimeout = old
	cl = e.dialRaw("", false)
	cl.send(map[string]any{"type": "request", "id": "x", "op": "session.list", "input": map[string]any{"workspace": testWS}})
	if code := cl.closeStatus(5 * time.Second); code != hub.CloseProtocol {
		t.Fatalf("non-hello close %d", code)
	}

	// Bad bearer header: HTTP 401 before the upgrade.
	code := e.httpDo("GET", "/v1/ws", "garbage", nil, nil)
	if code != 401 {
		t.Fatalf("bad header upgrade: %d", code)
	}
}

func (e *env) tokenExpired() string {
	tok, err := signRaw(testSecret, map[string]any{"sub": "alice", "exp": time.Now().Add(-time.Hour).Unix(),
		"workspaces": map[string]string{testWS: "member"}})
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

func TestTokenExpiresMidConnection(t *testing.T) {
	old := expiryGrace
	expiryGrace = 0
	defer func() { expiryGrace = old }()
	e := newEnv(t, envOpts{})
	tok, err := signRaw(testSecret, map[string]any{"sub": "alice", "exp": time.Now().Add(1500 * time.Millisecond).Unix(),
		"workspaces": map[string]string{testWS: "member"}})
	if err != nil {
		t.Fatal(err)
	}
	cl := e.dial(tok, true)
	if code := cl.closeStatus(10 * time.Second); code != hub.CloseTokenExpired {
		t.Fatalf("close %d", code)
	}
}

func TestTokenRefreshInBand(t *testing.T) {
	e := newEnv(t, envOpts{})
	cl := e.dial(e.member, true)
	cl.send(map[string]any{"type": "hello", "token": e.token("alice", auth.RoleViewer, time.Hour)})
	f := cl.next(5 * time.Second)
	if f.Type != "ready" {
		t.Fatalf("want ready after refresh, got %s", f.raw)
	}
	// Now a viewer: submitting is forbidden.
	g := cl.request("session.create", map[string]any{"workspace": testWS})
	if g.OK || g.Error.Code != protocol.CodeForbidden {
		t.Fatalf("want forbidden, got %s", g.raw)
	}
	// A token for somebody else ends the connection.
	cl.send(map[string]any{"type": "hello", "token": e.token("mallory", auth.RoleAdmin, time.Hour)})
	if code := cl.closeStatus(5 * time.Second); code != hub.CloseProtocol {
		t.Fatalf("close %d", code)
	}
}

func TestForbiddenAndBadFrames(t *testing.T) {
	e := newEnv(t, envOpts{})
	m := e.dial(e.member, false)
	sess := createSession(t, m)

	v := e.dial(e.viewer, true)
	f := v.request("turn.message.submit", map[string]any{"workspace": testWS, "sessionId": sess.ID,
		"clientSubmitId": "nope", "content": map[string]any{"text": "hi"}})
	if f.OK || f.Error.Code != protocol.CodeForbidden || f.Error.Retryable {
		t.Fatalf("viewer submit: %s", f.raw)
	}
	var turns protocol.TurnPage
	v.must("turn.list", map[string]any{"workspace": testWS, "sessionId": sess.ID}, &turns)
	if len(turns.Turns) != 0 {
		t.Fatalf("viewer submit changed something: %+v", turns.Turns)
	}
	// Viewers read and watch.
	subscribeSession(t, v, sess.ID, nil)

	// Another workspace: forbidden, without revealing anything.
	f = m.request("session.get", map[string]any{"workspace": "w2", "sessionId": sess.ID})
	if f.OK || f.Error.Code != protocol.CodeForbidden {
		t.Fatalf("other workspace: %s", f.raw)
	}

	// Bad JSON: invalid_input, and the connection keeps working.
	m.sendRaw([]byte(`{"type":"request","id":"bad",`))
	f = m.next(5 * time.Second)
	if f.Type != "response" || f.OK || f.Error.Code != protocol.CodeInvalidInput {
		t.Fatalf("bad json: %s", f.raw)
	}
	m.sendRaw([]byte(`{"type":"request","id":"r-unknown-field","op":"session.list","input":{"workspace":"w1","bogus":1}}`))
	f = m.next(5 * time.Second)
	if string(f.ID) != `"r-unknown-field"` || f.Error == nil || f.Error.Code != protocol.CodeInvalidInput {
		t.Fatalf("unknown field: %s", f.raw)
	}
	checks := map[string]protocol.Code{"session.nuke": protocol.CodeInvalidInput, "session.purge": protocol.CodeForbidden}
	if op := unimplementedMemberOp(); op != "" {
		checks[op] = protocol.CodeUnsupported
	}
	for op, want := range checks {
		f = m.request(op, map[string]any{"workspace": testWS, "sessionId": sess.ID})
		if f.OK || f.Error.Code != want {
			t.Fatalf("%s: %s", op, f.raw)
		}
	}
	f = m.request("session.get", map[string]any{"workspace": testWS, "sessionId": "ses_missing"})
	if f.OK || f.Error.Code != protocol.CodeNotFound {
		t.Fatalf("missing session: %s", f.raw)
	}
	var list protocol.SessionPage
	m.must("session.list", map[string]any{"workspace": testWS}, &list)
	if len(list.Sessions) != 1 {
		t.Fatalf("list: %+v", list)
	}
	// Subscribing to a missing session is not_found.
	f = m.request("subscribe", map[string]any{"workspace": testWS, "topic": "session", "sessionId": "ses_missing"})
	if f.OK || f.Error.Code != protocol.CodeNotFound {
		t.Fatalf("subscribe missing: %s", f.raw)
	}
}

func TestMissingSubprotocol(t *testing.T) {
	e := newEnv(t, envOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocketDialNoProto(ctx, e.wsURL(), e.member)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	_, _, err = c.Read(ctx)
	if code := closeStatusOf(err); code != hub.CloseProtocol {
		t.Fatalf("close %d (%v)", code, err)
	}
}

func TestShutdownClosesWith4001(t *testing.T) {
	e := newEnv(t, envOpts{})
	a, b := e.dial(e.member, false), e.dial(e.viewer, true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for _, cl := range []*client{a, b} {
		if code := cl.closeStatus(5 * time.Second); code != hub.CloseShutdown {
			t.Fatalf("close %d", code)
		}
	}
	if code := e.httpDo("GET", "/readyz", "", nil, nil); code != 503 {
		t.Fatalf("readyz while draining: %d", code)
	}
	if !strings.Contains(e.wsURL(), "/v1/ws") {
		t.Fatal("url")
	}
}
