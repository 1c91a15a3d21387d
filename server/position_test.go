package server

import (
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/auth"
	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/protocol"
)

type positionResult struct {
	subResult
	Position *protocol.Position       `json:"position"`
	Changes  *protocol.SessionChanges `json:"changes"`
}

// TestResumeFromPosition: a watcher that left resumes from its durable
// position (not the hub-local seq) with recovered:true and the changes it
// missed; bad, old, foreign and cross-workspace positions get typed errors
// or a snapshot, never another workspace's data.
func TestResumeFromPosition(t *testing.T) {
	e := newEnv(t, envOpts{})
	a := e.dial(e.member, false)
	sess := createSession(t, a)
	var first positionResult
	a.must("subscribe", map[string]any{"workspace": testWS, "topic": "session", "sessionId": sess.ID}, &first)
	if first.Position == nil || first.Position.Epoch == "" {
		t.Fatalf("subscribe result has no position: %+v", first)
	}
	_ = a.c.CloseNow()
	<-a.closed

	var sr host.SendResult
	if code := e.httpDo("POST", "/v1/workspaces/"+testWS+"/sessions/"+sess.ID+"/messages", e.member,
		map[string]any{"clientSubmitId": "away", "content": map[string]any{"text": "/sim words=10\nwhile you were out"}}, &sr); code != 200 {
		t.Fatalf("submit: %d", code)
	}
	e.waitSettled(sess.ID, sr.Turn.ID)
	id, want := agentText(t, e, sess.ID)

	sub := func(cl *client, ws string, pos any) frame {
		return cl.request("subscribe", map[string]any{"workspace": ws, "topic": "session", "sessionId": sess.ID, "position": pos})
	}
	b := e.dial(e.member, false)
	var res positionResult
	waitFor(t, func() bool { // the hub has the settled answer
		f := sub(b, testWS, first.Position)
		mustJSON(t, f.Result, &res)
		if !res.Recovered || res.Snapshot != nil || res.Changes == nil {
			t.Fatalf("want recovered without snapshot: %s", f.raw)
		}
		for _, m := range res.Changes.Messages {
			if m.ID == id && m.Content.Text == want {
				return true
			}
		}
		return false
	})
	if res.Position == nil || res.Position.Version <= first.Position.Version || res.Changes.Session.ID != sess.ID {
		t.Fatalf("recovered result: %+v", res)
	}

	// A position of another history: a snapshot.
	f := sub(b, testWS, map[string]any{"epoch": "h1.elsewhere", "version": first.Position.Version})
	mustJSON(t, f.Result, &res)
	if !f.OK || res.Recovered || res.Snapshot == nil {
		t.Fatalf("foreign epoch: %s", f.raw)
	}
	// Malformed or impossible positions: invalid_input.
	for _, bad := range []any{
		map[string]any{"epoch": "", "version": 1},
		map[string]any{"epoch": first.Position.Epoch, "version": -1},
		map[string]any{"epoch": first.Position.Epoch, "version": 1 << 40},
		map[string]any{"epoch": first.Position.Epoch, "version": "x"},
		map[string]any{"epoch": first.Position.Epoch, "version": 1, "seq": 2},
	} {
		if f := sub(b, testWS, bad); f.OK || f.Error.Code != protocol.CodeInvalidInput {
			t.Fatalf("position %v: %s", bad, f.raw)
		}
	}
	f = b.request("subscribe", map[string]any{"workspace": testWS, "topic": "workspace", "position": first.Position})
	if f.OK || f.Error.Code != protocol.CodeInvalidInput {
		t.Fatalf("position on a workspace topic: %s", f.raw)
	}

	// Another workspace: a non-member is forbidden; a member of both who
	// names the session under the other workspace finds nothing.
	if f := sub(b, "w2", first.Position); f.OK || f.Error.Code != protocol.CodeForbidden {
		t.Fatalf("non-member: %s", f.raw)
	}
	both, err := auth.Mint(testSecret, auth.Claims{Sub: "bob", Name: "Bob",
		Workspaces: map[string]auth.Role{testWS: auth.RoleMember, "w2": auth.RoleMember}, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	c := e.dial(both, false)
	if f := sub(c, "w2", first.Position); f.OK || f.Error.Code != protocol.CodeNotFound {
		t.Fatalf("session under another workspace: %s", f.raw)
	}
}
