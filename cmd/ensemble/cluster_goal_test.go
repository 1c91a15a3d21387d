package main

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

type clusterGoalState struct {
	Revision int64 `json:"revision"`
	Seq      int64 `json:"seq"`
	Goal     *struct {
		Status       string `json:"status"`
		TurnsUsed    int    `json:"turnsUsed"`
		PausedBy     string `json:"pausedBy"`
		ActiveTurnID string `json:"activeTurnId"`
		OperationID  string `json:"operationId"`
	} `json:"goal"`
}

// waitGoal polls goal.get on p until ok.
func (c *cluster) waitGoal(p *serverProc, sid string, ok func(clusterGoalState) bool) clusterGoalState {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var res struct {
			State clusterGoalState `json:"state"`
		}
		code, err := c.rest(p, http.MethodGet, "/sessions/"+sid+"/goal", nil, &res)
		if err == nil && code == http.StatusOK && ok(res.State) {
			return res.State
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("goal never reached the state (last %+v, %d %v)", res.State, code, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// goalStates decodes what the watcher applied.
func (w *watcher) goalStates() []clusterGoalState {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]clusterGoalState, 0, len(w.goals))
	for _, raw := range w.goals {
		var g clusterGoalState
		if err := json.Unmarshal(raw, &g); err != nil {
			w.t.Fatalf("goal_state payload: %v", err)
		}
		out = append(out, g)
	}
	return out
}

// A goal set on replica A runs its loop there; a watcher on replica B sees
// every goal_state change, in order (Seq 1, 2, 3 … without a gap), up to
// the final state A reads. Then a pause sent to B (not the owner) fences
// the running goal turn on A, and the watcher sees that too.
func TestClusterGoalStateReachesEveryReplicaInOrder(t *testing.T) {
	c := newCluster(t, clusterRedis(t), 2)
	a, b := c.replicas[0], c.replicas[1]
	sid := c.createSession(a)
	wb := c.watch(b, sid)

	c.mustRest(a, http.MethodPost, "/sessions/"+sid+"/goal", map[string]any{"clientSubmitId": "goal-1", "action": "set",
		"goal": map[string]any{"objective": "/sim instant goal-after=3\nShip it", "maxTurns": 5}}, nil, http.StatusOK)
	final := c.waitGoal(a, sid, func(g clusterGoalState) bool { return g.Goal != nil && g.Goal.Status == "achieved" })
	if final.Goal.TurnsUsed != 3 {
		t.Fatalf("achieved after %d turns", final.Goal.TurnsUsed)
	}
	waitWatcher(t, wb, func(gs []clusterGoalState) bool { return len(gs) > 0 && gs[len(gs)-1].Seq == final.Seq })
	gs := wb.goalStates()
	for i, g := range gs {
		if g.Seq != int64(i+1) {
			t.Fatalf("watcher on B: goal_state %d has seq %d (every change, in order, expected)", i, g.Seq)
		}
	}
	if last := gs[len(gs)-1]; last.Goal == nil || last.Goal.Status != "achieved" || last.Revision != final.Revision {
		t.Fatalf("watcher on B ends at %+v, A reads %+v", last, final)
	}

	// A new goal that runs until stopped, paused through B.
	c.mustRest(a, http.MethodPost, "/sessions/"+sid+"/goal", map[string]any{"clientSubmitId": "goal-2", "action": "set",
		"goal": map[string]any{"objective": "/sim hang\nKeep going"}}, nil, http.StatusOK)
	running := c.waitGoal(a, sid, func(g clusterGoalState) bool { return g.Goal != nil && g.Goal.ActiveTurnID != "" })
	turnID := running.Goal.ActiveTurnID
	c.mustRest(b, http.MethodPost, "/sessions/"+sid+"/goal", map[string]any{"clientSubmitId": "goal-3", "action": "pause"}, nil, http.StatusOK)
	paused := c.waitGoal(b, sid, func(g clusterGoalState) bool { return g.Goal != nil && g.Goal.Status == "paused" })
	tr := c.waitSettled(a, sid, turnID)
	if tr.Outcome != "canceled" {
		t.Fatalf("fenced goal turn: %+v", tr)
	}
	waitWatcher(t, wb, func(gs []clusterGoalState) bool { return len(gs) > 0 && gs[len(gs)-1].Seq >= paused.Seq })
	gs = wb.goalStates()
	for i := 1; i < len(gs); i++ {
		if gs[i].Seq != gs[i-1].Seq+1 {
			t.Fatalf("watcher on B: seq %d after %d", gs[i].Seq, gs[i-1].Seq)
		}
	}
	wb.mu.Lock()
	werr := wb.err
	wb.mu.Unlock()
	if werr != nil {
		t.Fatalf("watcher: %v", werr)
	}
}

func waitWatcher(t *testing.T, w *watcher, ok func([]clusterGoalState) bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !ok(w.goalStates()) {
		if time.Now().After(deadline) {
			t.Fatalf("watcher never caught up: %d goal states", len(w.goalStates()))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
