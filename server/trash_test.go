package server

import (
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/protocol"
)

// waitKinds waits until each sub got an event of kind whose payload names
// sessionID, in any order across the subs.
func waitKinds(t *testing.T, cl *client, kind, sessionID string, subs ...string) {
	t.Helper()
	missing := map[string]bool{}
	for _, s := range subs {
		missing[s] = true
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(missing) > 0 && time.Now().Before(deadline) {
		f := cl.nextEvent(time.Until(deadline))
		if !missing[f.Sub] || f.Kind != kind {
			continue
		}
		var id string
		switch kind {
		case protocol.KindSessionRemoved:
			var p protocol.SessionRemoved
			mustJSON(t, f.Payload, &p)
			id = p.SessionID
		case protocol.KindSessionSummary:
			var p protocol.SessionSummary
			mustJSON(t, f.Payload, &p)
			id = p.Session.ID
		}
		if id == sessionID {
			delete(missing, f.Sub)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("no %s for %s on %v", kind, sessionID, missing)
	}
}

// A member deletes: another collaborator's workspace and session topics
// get session_removed, a viewer cannot delete, restore or purge, the
// Trash lists it, a member restores it and it reappears for the watcher;
// only an admin purges.
func TestTrashLifecycleOverTheWire(t *testing.T) {
	e := newEnv(t, envOpts{})
	alice := e.dial(e.member, false)
	watcher := e.dial(e.viewer, false)
	admin := e.dial(e.admin, false)
	s := createSession(t, alice)

	var ws struct {
		Sub string `json:"sub"`
	}
	watcher.must("subscribe", map[string]any{"workspace": testWS, "topic": "workspace"}, &ws)
	ss := subscribeSession(t, watcher, s.ID, nil)

	for _, op := range []string{"session.delete", "session.restore", "session.purge"} {
		if f := watcher.request(op, map[string]any{"workspace": testWS, "sessionId": s.ID}); f.OK || f.Error.Code != protocol.CodeForbidden {
			t.Fatalf("viewer %s: %s", op, f.raw)
		}
	}
	if f := alice.request("session.purge", map[string]any{"workspace": testWS, "sessionId": s.ID}); f.OK || f.Error.Code != protocol.CodeForbidden {
		t.Fatalf("member purge: %s", f.raw)
	}
	if f := alice.request("session.delete", map[string]any{"workspace": testWS, "sessionId": s.ID, "sessionIds": []string{s.ID}}); f.OK || f.Error.Code != protocol.CodeInvalidInput {
		t.Fatalf("both sessionId and sessionIds: %s", f.raw)
	}

	var del protocol.DeleteSessionsResult
	alice.must("session.delete", map[string]any{"workspace": testWS, "sessionIds": []string{s.ID}}, &del)
	if len(del.DeletedSessionIDs) != 1 || del.DeletedSessionIDs[0] != s.ID {
		t.Fatalf("delete: %+v", del)
	}
	waitKinds(t, watcher, protocol.KindSessionRemoved, s.ID, ws.Sub, ss.Sub)
	if f := watcher.request("session.get", map[string]any{"workspace": testWS, "sessionId": s.ID}); f.OK || f.Error.Code != protocol.CodeNotFound {
		t.Fatalf("get deleted: %s", f.raw)
	}

	var trash protocol.DeletedPage
	watcher.must("session.listDeleted", map[string]any{"workspace": testWS}, &trash)
	if len(trash.Sessions) != 1 || trash.Sessions[0].Session.ID != s.ID || trash.Sessions[0].Tombstone.DeletedBy != "alice" || trash.Sessions[0].Tombstone.DeletedByName == "" || !trash.Sessions[0].Tombstone.Restorable {
		t.Fatalf("trash: %+v", trash)
	}

	var rr protocol.RestoreResult
	alice.must("session.restore", map[string]any{"workspace": testWS, "sessionId": s.ID}, &rr)
	if !rr.Restored || rr.Session.ID != s.ID {
		t.Fatalf("restore: %+v", rr)
	}
	// It reappears on both topics.
	waitKinds(t, watcher, protocol.KindSessionSummary, s.ID, ws.Sub, ss.Sub)

	alice.must("session.delete", map[string]any{"workspace": testWS, "sessionId": s.ID}, &del)
	var pr protocol.PurgeResult
	admin.must("session.purge", map[string]any{"workspace": testWS, "sessionIds": []string{s.ID}}, &pr)
	if len(pr.Purged) != 1 || pr.Counts.Sessions != 1 {
		t.Fatalf("purge: %+v", pr)
	}
	watcher.must("session.listDeleted", map[string]any{"workspace": testWS}, &trash)
	if len(trash.Sessions) != 0 {
		t.Fatalf("trash after purge: %+v", trash)
	}
	if f := alice.request("session.restore", map[string]any{"workspace": testWS, "sessionId": s.ID}); f.OK || f.Error.Code != protocol.CodeNotFound {
		t.Fatalf("restore after purge: %s", f.raw)
	}
}

// waitTrash waits for a trash_changed on sub whose payload has want in the
// list pick selects.
func waitTrash(t *testing.T, cl *client, sub string, pick func(protocol.TrashChanged) []string, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		f := cl.nextEvent(time.Until(deadline))
		if f.Sub != sub || f.Kind != protocol.KindTrashChanged {
			continue
		}
		var p protocol.TrashChanged
		mustJSON(t, f.Payload, &p)
		if p.Workspace != testWS {
			t.Fatalf("trash_changed of another workspace: %s", f.raw)
		}
		for _, id := range pick(p) {
			if id == want {
				return
			}
		}
	}
	t.Fatalf("no trash_changed naming %s on %s", want, sub)
}

// A workspace watcher (a viewer, so it can only watch) hears every Trash
// change as a typed trash_changed: delete, restore, an admin's purge and
// a retention purge, which changes no visible session and so sends no
// session_removed.
func TestTrashChangedReachesWorkspaceWatchers(t *testing.T) {
	e := newEnv(t, envOpts{})
	alice := e.dial(e.member, false)
	watcher := e.dial(e.viewer, false)
	admin := e.dial(e.admin, false)
	var ws struct {
		Sub string `json:"sub"`
	}
	watcher.must("subscribe", map[string]any{"workspace": testWS, "topic": "workspace"}, &ws)
	deleted := func(p protocol.TrashChanged) []string { return p.Deleted }
	restored := func(p protocol.TrashChanged) []string { return p.Restored }
	purged := func(p protocol.TrashChanged) []string { return p.Purged }

	s := createSession(t, alice)
	alice.must("session.delete", map[string]any{"workspace": testWS, "sessionId": s.ID}, nil)
	waitTrash(t, watcher, ws.Sub, deleted, s.ID)
	alice.must("session.restore", map[string]any{"workspace": testWS, "sessionId": s.ID}, nil)
	waitTrash(t, watcher, ws.Sub, restored, s.ID)
	alice.must("session.delete", map[string]any{"workspace": testWS, "sessionId": s.ID}, nil)
	waitTrash(t, watcher, ws.Sub, deleted, s.ID)
	admin.must("session.purge", map[string]any{"workspace": testWS, "sessionId": s.ID}, nil)
	waitTrash(t, watcher, ws.Sub, purged, s.ID)

	// Retention: the background pass purges through the same commit.
	old := createSession(t, alice)
	alice.must("session.delete", map[string]any{"workspace": testWS, "sessionId": old.ID}, nil)
	waitTrash(t, watcher, ws.Sub, deleted, old.ID)
	time.Sleep(5 * time.Millisecond)
	res, err := e.host.PurgeExpired(t.Context(), time.Millisecond)
	if err != nil || len(res.Purged) != 1 || res.Purged[0].RootSessionID != old.ID {
		t.Fatalf("retention purge: %+v %v", res, err)
	}
	waitTrash(t, watcher, ws.Sub, purged, old.ID)
}
