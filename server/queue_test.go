package server

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/auth"
	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/protocol"
)

// queueEvent waits for a queue event on cl whose revision is at least rev.
func queueEvent(t *testing.T, cl *client, rev int64) protocol.QueueState {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		f := cl.nextEvent(10 * time.Second)
		if f.Kind != protocol.KindQueue {
			continue
		}
		var q protocol.QueueState
		if err := json.Unmarshal(f.Payload, &q); err != nil {
			t.Fatal(err)
		}
		if q.Revision >= rev {
			return q
		}
	}
	t.Fatalf("no queue event at revision %d", rev)
	return protocol.QueueState{}
}

// TestQueueFansOutToEveryCollaborator: two people watch a busy session;
// one queues a follow-up, both get the queue event and a late subscriber's
// snapshot carries it; the other cannot retract it, its author can; over
// REST and WS the same operations answer the same.
func TestQueueFansOutToEveryCollaborator(t *testing.T) {
	e := newEnv(t, envOpts{})
	alice := e.dial(e.member, false)
	bob := e.dial(e.token("bob", auth.RoleMember, time.Hour), true)
	var cr protocol.CreateSessionResult
	alice.must("session.create", map[string]any{"workspace": testWS, "clientSubmitId": "c1",
		"content": map[string]any{"text": "/sim hang"}}, &cr)
	sid, run := cr.Session.ID, cr.Turn.ID
	sub := map[string]any{"workspace": testWS, "topic": "session", "sessionId": sid}
	alice.must("subscribe", sub, nil)
	bob.must("subscribe", sub, nil)

	// Without a placement a busy session still answers session_busy.
	if f := bob.request("turn.message.submit", map[string]any{"workspace": testWS, "sessionId": sid,
		"clientSubmitId": "b0", "content": map[string]any{"text": "hi"}}); f.OK || f.Error.Code != protocol.CodeSessionBusy {
		t.Fatalf("submit without placement: %s", f.raw)
	}
	var sr host.SendResult
	bob.must("turn.message.submit", map[string]any{"workspace": testWS, "sessionId": sid, "clientSubmitId": "b1",
		"content": map[string]any{"text": "/sim words=2 after you"}, "placement": "next_turn"}, &sr)
	if sr.Disposition != host.DispositionFollowup || sr.Entry == nil || sr.Entry.AuthorName != "Bob" {
		t.Fatalf("queued submit: %+v", sr)
	}
	for _, cl := range []*client{alice, bob} {
		q := queueEvent(t, cl, sr.QueueRevision)
		if len(q.Entries) != 1 || q.Entries[0].ID != sr.Entry.ID || q.Entries[0].Author != "bob" {
			t.Fatalf("queue event: %+v", q)
		}
	}
	// A late watcher's snapshot carries the queue.
	carol := e.dial(e.viewer, false)
	var snap struct {
		Snapshot protocol.SessionSnapshot `json:"snapshot"`
	}
	carol.must("subscribe", sub, &snap)
	if snap.Snapshot.Queue == nil || len(snap.Snapshot.Queue.Entries) != 1 {
		t.Fatalf("snapshot queue: %+v", snap.Snapshot.Queue)
	}
	// REST: the same queue.
	var got struct {
		Queue protocol.Queue `json:"queue"`
	}
	if code := e.httpDo("GET", "/v1/workspaces/"+testWS+"/sessions/"+sid+"/queue", e.viewer, nil, &got); code != 200 || len(got.Queue.Entries) != 1 {
		t.Fatalf("GET queue: %d %+v", code, got)
	}
	retract := map[string]any{"workspace": testWS, "sessionId": sid, "entryId": sr.Entry.ID}
	if f := alice.request("queue.retract", retract); f.OK || f.Error.Code != protocol.CodeForbidden {
		t.Fatalf("retract of someone else's entry: %s", f.raw)
	}
	if f := carol.request("queue.retract", retract); f.OK || f.Error.Code != protocol.CodeForbidden {
		t.Fatalf("viewer retract: %s", f.raw)
	}
	var rr protocol.RetractResult
	if code := e.httpDo("POST", "/v1/workspaces/"+testWS+"/sessions/"+sid+"/queue/retract", e.token("bob", auth.RoleMember, time.Hour),
		map[string]any{"entryId": sr.Entry.ID}, &rr); code != 200 || rr.Entry.State != host.QueueRetracted {
		t.Fatalf("author retract over REST: %d %+v", code, rr)
	}
	for _, cl := range []*client{alice, bob} {
		if q := queueEvent(t, cl, rr.QueueRevision); len(q.Entries) != 0 {
			t.Fatalf("queue after retract: %+v", q)
		}
	}
	// Steering: the sim agent takes it into the running turn.
	bob.must("turn.message.submit", map[string]any{"workspace": testWS, "sessionId": sid, "clientSubmitId": "b2",
		"content": map[string]any{"text": "steer left"}, "placement": "current_turn"}, &sr)
	if sr.Disposition != host.DispositionSteering {
		t.Fatalf("steering submit: %+v", sr)
	}
	waitFor(t, func() bool { // pulled: no longer waiting
		q, err := e.host.Queue(t.Context(), testWS, sid)
		return err == nil && len(q.Entries) == 0
	})
	// Interrupt answers the canonical terminal.
	var ir protocol.InterruptResult
	alice.must("turn.interrupt", map[string]any{"workspace": testWS, "sessionId": sid, "turnId": run}, &ir)
	if ir.Turn.ID != run || ir.Turn.Outcome != host.OutcomeCanceled || ir.Turn.CanceledByName != "Alice" {
		t.Fatalf("interrupt: %+v", ir.Turn)
	}
}
