package server

import (
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/hub"
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
	var res host.GoalControlResult
	m.must("goal.control", map[string]any{"workspace": testWS, "sessionId": sess.ID, "clientSubmitId": "g-1",
		"action": "set", "goal": map[string]any{"objective": "/sim instant goal-after=2\nShip it", "maxTurns": 4}}, &res)
	if !res.IntentAccepted || res.Goal == nil || res.Goal.SetBy != "alice" || res.Operation.Action != "set" {
		t.Fatalf("goal.control: %+v", res)
	}
	var last int64
	deadline := time.Now().Add(20 * time.Second)
	for {
		f := v.nextEvent(time.Until(deadline))
		if f.Kind != hub.KindGoalState {
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
	if f.OK || f.Error.Code != host.CodeForbidden {
		t.Fatalf("viewer goal.control: %s", f.raw)
	}
	var rest host.GoalControlResult
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
	var cr host.CreateSessionResult
	m.must("session.create", map[string]any{"workspace": testWS, "clientSubmitId": "c-goal",
		"goal": map[string]any{"objective": "/sim instant goal-after=1\nFrom the start"}}, &cr)
	if cr.Turn != nil || cr.Goal == nil || !cr.Goal.IntentAccepted {
		t.Fatalf("create with goal: %+v", cr)
	}
	f = m.request("session.create", map[string]any{"workspace": testWS, "clientSubmitId": "c-both",
		"content": map[string]any{"text": "hi"}, "goal": map[string]any{"objective": "x"}})
	if f.OK || f.Error.Code != host.CodeInvalidInput {
		t.Fatalf("content and goal: %s", f.raw)
	}
}
