package server

import (
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/protocol"
)

// A member sets a goal over the WebSocket; a viewer watching the session
// gets every goal_state change in Seq order up to achieved, reads it with
// goal.get (WebSocket and REST), may not control it, and a later
// subscriber's snapshot carries the goal.
func TestGoalControlFansOutToWatchers(t *testing.T) {
	e := newEnv(t, envOpts{})
	m, v := e.dial(e.member, false), e.dial(e.viewer, true)
	sess := createSession(t, m)
	rv := subscribeSession(t, v, sess.ID, nil)
	if rv.Snapshot == nil || rv.Snapshot.Goal != nil {
		t.Fatalf("snapshot before any goal: %+v", rv.Snapshot)
	}
	var res protocol.GoalControlResult
	m.must("goal.control", map[string]any{"workspace": testWS, "sessionId": sess.ID, "clientSubmitId": "g-1",
		"action": "set", "goal": map[string]any{"objective": "/sim instant goal-after=2\nShip it", "maxTurns": 4}}, &res)
	if !res.IntentAccepted || res.Goal == nil || res.Goal.SetBy != "alice" || res.Operation.Action != "set" {
		t.Fatalf("goal.control: %+v", res)
	}
	var last int64
	deadline := time.Now().Add(20 * time.Second)
	for {
		f := v.nextEvent(time.Until(deadline))
		if f.Kind != protocol.KindGoalState {
			continue
		}
		var g host.GoalState
		mustJSON(t, f.Payload, &g)
		if g.Seq <= last {
			t.Fatalf("goal_state out of order: seq %d after %d", g.Seq, last)
		}
		last = g.Seq
		if g.Goal != nil && g.Goal.Status == host.GoalAchieved {
			if g.Goal.TurnsUsed != 2 {
				t.Fatalf("achieved after %d turns", g.Goal.TurnsUsed)
			}
			break
		}
	}
	var got struct {
		Goal  *host.Goal     `json:"goal"`
		State host.GoalState `json:"state"`
	}
	v.must("goal.get", map[string]any{"workspace": testWS, "sessionId": sess.ID}, &got)
	if got.Goal == nil || got.Goal.Status != host.GoalAchieved || got.State.Seq != last {
		t.Fatalf("goal.get: %+v", got)
	}
	if code := e.httpDo("GET", "/v1/workspaces/"+testWS+"/sessions/"+sess.ID+"/goal", e.viewer, nil, &got); code != 200 || got.Goal == nil {
		t.Fatalf("REST goal.get: %d %+v", code, got)
	}
	f := v.request("goal.control", map[string]any{"workspace": testWS, "sessionId": sess.ID, "clientSubmitId": "g-2", "action": "clear"})
	if f.OK || f.Error.Code != protocol.CodeForbidden {
		t.Fatalf("viewer goal.control: %s", f.raw)
	}
	var rest protocol.GoalControlResult
	if code := e.httpDo("POST", "/v1/workspaces/"+testWS+"/sessions/"+sess.ID+"/goal", e.member,
		map[string]any{"clientSubmitId": "g-1", "action": "set", "goal": map[string]any{"objective": "other"}}, &rest); code != 409 {
		t.Fatalf("conflicting retry over REST: %d", code)
	}
	late := e.dial(e.member, false)
	rl := subscribeSession(t, late, sess.ID, nil)
	if rl.Snapshot == nil || rl.Snapshot.Goal == nil || rl.Snapshot.Goal.Seq != last {
		t.Fatalf("snapshot goal: %+v", rl.Snapshot)
	}
	// session.create with a typed goal, exclusive with content.
	var cr protocol.CreateSessionResult
	m.must("session.create", map[string]any{"workspace": testWS, "clientSubmitId": "c-goal",
		"goal": map[string]any{"objective": "/sim instant goal-after=1\nFrom the start"}}, &cr)
	if cr.Turn != nil || cr.Goal == nil || !cr.Goal.IntentAccepted {
		t.Fatalf("create with goal: %+v", cr)
	}
	f = m.request("session.create", map[string]any{"workspace": testWS, "clientSubmitId": "c-both",
		"content": map[string]any{"text": "hi"}, "goal": map[string]any{"objective": "x"}})
	if f.OK || f.Error.Code != protocol.CodeInvalidInput {
		t.Fatalf("content and goal: %s", f.raw)
	}
}

// A workspace watcher's session list follows the goal live: the snapshot
// and every session_summary carry the session's goal summary, refreshed
// when a goal_state commits (set, pause, resume). After a delete and a
// restore the goal is held: the list says so and the session watcher's
// goal_state says so too, without a reload.
func TestGoalSummaryReachesWorkspaceWatchers(t *testing.T) {
	e := newEnv(t, envOpts{})
	m, w := e.dial(e.member, false), e.dial(e.viewer, false)
	sess := createSession(t, m)
	var ws struct {
		Sub      string                      `json:"sub"`
		Snapshot *protocol.WorkspaceSnapshot `json:"snapshot"`
	}
	w.must("subscribe", map[string]any{"workspace": testWS, "topic": "workspace"}, &ws)
	if ws.Snapshot == nil || len(ws.Snapshot.Sessions) != 1 || ws.Snapshot.Sessions[0].Goal != nil {
		t.Fatalf("workspace snapshot before any goal: %+v", ws.Snapshot)
	}
	var last protocol.Session // the newest summary seen: it may already match
	waitSession := func(what string, ok func(protocol.Session) bool) {
		t.Helper()
		if last.ID != "" && ok(last) {
			return
		}
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			f := w.nextEvent(time.Until(deadline))
			if f.Sub != ws.Sub || f.Kind != protocol.KindSessionSummary {
				continue
			}
			var p protocol.SessionSummary
			mustJSON(t, f.Payload, &p)
			if p.Session.ID != sess.ID {
				continue
			}
			last = p.Session
			if ok(p.Session) {
				return
			}
		}
		t.Fatalf("no session_summary with the goal %s", what)
	}
	waitSummary := func(what string, ok func(*protocol.GoalSummary) bool) {
		t.Helper()
		waitSession(what, func(s protocol.Session) bool { return ok(s.Goal) })
	}
	control := func(csid, action string, goal map[string]any) {
		in := map[string]any{"workspace": testWS, "sessionId": sess.ID, "clientSubmitId": csid, "action": action}
		if goal != nil {
			in["goal"] = goal
		}
		var res protocol.GoalControlResult
		m.must("goal.control", in, &res)
	}
	const obj = "/sim goal-after=9 goal-hang-from=2\nPolish the README"
	control("gs-1", "set", map[string]any{"objective": obj})
	waitSummary("active", func(g *protocol.GoalSummary) bool {
		return g != nil && g.Status == host.GoalActive && g.Objective == obj && !g.Held
	})
	control("gs-2", "pause", nil)
	waitSummary("paused", func(g *protocol.GoalSummary) bool { return g != nil && g.Status == host.GoalPaused })
	var page protocol.SessionPage
	w.must("session.list", map[string]any{"workspace": testWS}, &page)
	if len(page.Sessions) != 1 || page.Sessions[0].Goal == nil || page.Sessions[0].Goal.Status != host.GoalPaused {
		t.Fatalf("session.list goal: %+v", page.Sessions)
	}
	// Once the paused goal's turn has ended, a clear changes nothing but
	// the goal: only its goal_state fact can refresh the list.
	waitSession("paused, its turn ended", func(s protocol.Session) bool {
		return s.ActiveTurnID == "" && s.Goal != nil && s.Goal.Status == host.GoalPaused
	})
	control("gs-3", "clear", nil)
	waitSummary("cleared (none)", func(g *protocol.GoalSummary) bool { return g == nil })
	control("gs-3b", "set", map[string]any{"objective": obj})
	waitSummary("set again", func(g *protocol.GoalSummary) bool { return g != nil && g.Status == host.GoalActive && !g.Held })

	ss := subscribeSession(t, w, sess.ID, nil)
	var del protocol.DeleteSessionsResult
	m.must("session.delete", map[string]any{"workspace": testWS, "sessionIds": []string{sess.ID}}, &del)
	var rr protocol.RestoreResult
	m.must("session.restore", map[string]any{"workspace": testWS, "sessionId": sess.ID}, &rr)
	// The session watcher learns the goal is held from a goal_state event.
	deadline := time.Now().Add(10 * time.Second)
	sawHeld := false
	for !sawHeld && time.Now().Before(deadline) {
		f := w.nextEvent(time.Until(deadline))
		if f.Sub == ws.Sub && f.Kind == protocol.KindSessionSummary {
			// The list's held summary may come first: keep it for the
			// wait below instead of dropping it.
			var p protocol.SessionSummary
			mustJSON(t, f.Payload, &p)
			if p.Session.ID == sess.ID {
				last = p.Session
			}
			continue
		}
		if f.Sub != ss.Sub || f.Kind != protocol.KindGoalState {
			continue
		}
		var g host.GoalState
		mustJSON(t, f.Payload, &g)
		sawHeld = g.Held && g.Goal != nil && g.Goal.Status == host.GoalActive
	}
	if !sawHeld {
		t.Fatalf("the session watcher got no held goal_state")
	}
	waitSummary("held after restore", func(g *protocol.GoalSummary) bool { return g != nil && g.Status == host.GoalActive && g.Held })
	control("gs-4", "resume", nil)
	waitSummary("resumed from held", func(g *protocol.GoalSummary) bool { return g != nil && g.Status == host.GoalActive && !g.Held })
}
