package storetest

import (
	"strings"
	"testing"

	"github.com/ensemble-dev/ensemble/host"
)

// testGoals: the goal record, goal operations and fences round-trip, are
// scoped by workspace, refuse to go backwards and feed the recovery scans.
func testGoals(t *testing.T, st host.Store) {
	ws, other := uid("ws"), uid("ws")
	sid := uid("s")
	seed(t, st, []host.Session{session(ws, sid, at(0))}, nil, nil, nil)
	c := ctx(t)

	_, err := st.GetGoal(c, ws, sid)
	wantIs(t, "goal before any", err, host.ErrNotFound)

	g := host.GoalState{WorkspaceID: ws, SessionID: sid, Revision: 1, Seq: 1, UpdatedAt: at(5),
		Goal: &host.Goal{GoalSpec: host.GoalSpec{Objective: "ship it", Criteria: "tests pass", MaxTurns: 3, MaxDuration: "10m"},
			Status: host.GoalActive, Revision: 1, Generation: 1, OperationID: "gop-1", Source: "user",
			SetBy: "alice", SetByName: "Alice", StartedAt: at(5), UpdatedAt: at(5)}}
	op := host.GoalOperation{WorkspaceID: ws, ClientSubmitID: "c1", ID: "gop-1", SessionID: sid,
		Action: host.GoalActionSet, Digest: "d1", Spec: &g.Goal.GoalSpec, Revision: 1,
		State: host.GoalOpAccepted, By: "alice", CreatedAt: at(5), UpdatedAt: at(5)}
	fence := host.GoalFence{WorkspaceID: ws, SessionID: sid, OperationID: "gop-0", Revision: 0,
		ByOperation: "gop-1", State: host.GoalFencePending, CreatedAt: at(5), UpdatedAt: at(5)}
	update(t, st, func(tx host.Tx) error {
		if err := tx.PutGoal(c, g); err != nil {
			return err
		}
		if err := tx.InsertGoalOperation(c, op); err != nil {
			return err
		}
		got, err := tx.Goal(c, ws, sid) // a tx sees its own writes
		if err != nil || got.Goal == nil || got.Goal.Objective != "ship it" {
			t.Errorf("tx goal = %+v, %v", got, err)
		}
		return tx.InsertGoalFence(c, fence)
	})
	got, err := st.GetGoal(c, ws, sid)
	noErr(t, "get goal", err)
	same(t, "goal", got, g, normGoal)
	gotOp, err := st.GetGoalOperation(c, ws, "c1")
	noErr(t, "get goal op", err)
	same(t, "goal operation", gotOp, op, normGoalOp)

	// Workspace scoping: the same keys in another workspace are absent.
	_, err = st.GetGoal(c, other, sid)
	wantIs(t, "foreign goal", err, host.ErrNotFound)
	_, err = st.GetGoalOperation(c, other, "c1")
	wantIs(t, "foreign goal op", err, host.ErrNotFound)

	// Duplicates.
	err = st.Update(c, func(tx host.Tx) error { return tx.InsertGoalOperation(c, op) })
	wantIs(t, "duplicate goal op", err, host.ErrDuplicate)
	err = st.Update(c, func(tx host.Tx) error { return tx.InsertGoalFence(c, fence) })
	wantIs(t, "duplicate fence", err, host.ErrDuplicate)

	// The revision never goes back.
	old := g
	old.Revision, old.Seq = 0, 0
	err = st.Update(c, func(tx host.Tx) error { return tx.PutGoal(c, old) })
	wantIs(t, "goal going back", err, host.ErrConflict)

	// Recovery scans see the live goal, the pending fence and operation.
	if !hasGoal(t, st, ws, sid) {
		t.Fatalf("LiveGoals misses the active goal")
	}
	if !hasFence(t, st, ws, "gop-0") {
		t.Fatalf("PendingGoalFences misses the fence")
	}
	if !hasOp(t, st, ws, "c1") {
		t.Fatalf("PendingGoalOperations misses the operation")
	}

	// A quarantined goal record or operation leaves the scans (another
	// session's goal and operation stay).
	sid2 := uid("s")
	seed(t, st, []host.Session{session(ws, sid2, at(0))}, nil, nil, nil)
	g3 := g
	g3.SessionID = sid2
	op3 := op
	op3.ClientSubmitID, op3.ID, op3.SessionID = "c3", "gop-3", sid2
	update(t, st, func(tx host.Tx) error {
		if err := tx.PutGoal(c, g3); err != nil {
			return err
		}
		return tx.InsertGoalOperation(c, op3)
	})
	noErr(t, "quarantine goal", st.Quarantine(c, host.Quarantined{WorkspaceID: ws, Kind: host.QuarantineKindGoal,
		Key: ws + "/" + sid2, Reason: "test", At: at(6)}))
	noErr(t, "quarantine goal op", st.Quarantine(c, host.Quarantined{WorkspaceID: ws, Kind: host.QuarantineKindGoalOperation,
		Key: ws + "/c3", Reason: "test", At: at(6)}))
	if hasGoal(t, st, ws, sid2) || hasOp(t, st, ws, "c3") {
		t.Fatalf("quarantined goal records are still in the recovery scans")
	}
	if !hasGoal(t, st, ws, sid) || !hasOp(t, st, ws, "c1") {
		t.Fatalf("quarantining one goal took another out of the scans")
	}

	// Progress: paused goal, applied op, done fence leave the scans.
	g2 := g
	gg := *g.Goal
	gg.Status, gg.Revision, gg.PausedBy = host.GoalPaused, 2, "bob"
	g2.Goal, g2.Revision, g2.Seq, g2.UpdatedAt = &gg, 2, 2, at(9)
	op.State, op.Revision, op.Error, op.UpdatedAt = host.GoalOpApplied, 2, "", at(9)
	op.Action = "tampered" // identity fields stay as first written
	fence.State, fence.UpdatedAt = host.GoalFenceDone, at(9)
	update(t, st, func(tx host.Tx) error {
		if err := tx.PutGoal(c, g2); err != nil {
			return err
		}
		if err := tx.UpdateGoalOperation(c, op); err != nil {
			return err
		}
		return tx.UpdateGoalFence(c, fence)
	})
	got, err = st.GetGoal(c, ws, sid)
	noErr(t, "get goal", err)
	same(t, "paused goal", got, g2, normGoal)
	gotOp, err = st.GetGoalOperation(c, ws, "c1")
	noErr(t, "get goal op", err)
	if gotOp.State != host.GoalOpApplied || gotOp.Revision != 2 || gotOp.Action != host.GoalActionSet {
		t.Fatalf("updated op = %+v", gotOp)
	}
	if hasGoal(t, st, ws, sid) || hasFence(t, st, ws, "gop-0") || hasOp(t, st, ws, "c1") {
		t.Fatalf("finished goal records still in the recovery scans")
	}
	err = st.Update(c, func(tx host.Tx) error {
		f := fence
		f.WorkspaceID = other
		return tx.UpdateGoalFence(c, f)
	})
	wantIs(t, "foreign fence update", err, host.ErrNotFound)
}

func hasGoal(t *testing.T, st host.Store, ws, sid string) bool {
	gs, bad, err := st.LiveGoals(ctx(t))
	noErr(t, "live goals", err)
	if len(bad) != 0 {
		t.Fatalf("LiveGoals: unexpected quarantine candidates %+v", bad)
	}
	for _, g := range gs {
		if g.WorkspaceID == ws && g.SessionID == sid {
			return true
		}
	}
	return false
}

func hasFence(t *testing.T, st host.Store, ws, opID string) bool {
	fs, err := st.PendingGoalFences(ctx(t))
	noErr(t, "pending fences", err)
	for _, f := range fs {
		if f.WorkspaceID == ws && f.OperationID == opID {
			return true
		}
	}
	return false
}

func hasOp(t *testing.T, st host.Store, ws, csid string) bool {
	ops, bad, err := st.PendingGoalOperations(ctx(t))
	noErr(t, "pending goal ops", err)
	if len(bad) != 0 {
		t.Fatalf("PendingGoalOperations: unexpected quarantine candidates %+v", bad)
	}
	for _, op := range ops {
		if op.WorkspaceID == ws && op.ClientSubmitID == csid {
			return true
		}
	}
	return false
}

func normGoal(g host.GoalState) host.GoalState {
	g.UpdatedAt = normTime(g.UpdatedAt)
	if g.Goal != nil {
		gg := *g.Goal
		gg.StartedAt, gg.UpdatedAt = normTime(gg.StartedAt), normTime(gg.UpdatedAt)
		g.Goal = &gg
	}
	return g
}

func normGoalOp(op host.GoalOperation) host.GoalOperation {
	op.CreatedAt, op.UpdatedAt = normTime(op.CreatedAt), normTime(op.UpdatedAt)
	return op
}

// testGoalSummaries: the session reads (list, get, changes) carry each
// session's live goal summary, read with the session and scoped by
// workspace: held exactly when the newest fence names the current active
// identity; terminal and missing goals carry none.
func testGoalSummaries(t *testing.T, st host.Store) {
	ws, other := uid("ws"), uid("ws")
	active, held, oldFence, paused, done, none := uid("s"), uid("s"), uid("s"), uid("s"), uid("s"), uid("s")
	long := strings.Repeat("é", host.GoalSummaryObjectiveMax+5)
	seed(t, st, []host.Session{session(ws, active, at(0)), session(ws, held, at(1)), session(ws, oldFence, at(2)),
		session(ws, paused, at(3)), session(ws, done, at(4)), session(ws, none, at(5)), session(other, active, at(6))}, nil, nil, nil)
	c := ctx(t)
	goal := func(w, sid string, status host.GoalStatus, obj, opID string, rev int64) host.GoalState {
		return host.GoalState{WorkspaceID: w, SessionID: sid, Revision: rev, Seq: rev, UpdatedAt: at(7),
			Goal: &host.Goal{GoalSpec: host.GoalSpec{Objective: obj}, Status: status, Revision: rev, Generation: 1,
				OperationID: opID, Source: "user", StartedAt: at(7), UpdatedAt: at(7)}}
	}
	fence := func(sid, opID string, rev int64) host.GoalFence {
		return host.GoalFence{WorkspaceID: ws, SessionID: sid, OperationID: opID, Revision: rev,
			ByOperation: "x", State: host.GoalFenceDone, CreatedAt: at(7), UpdatedAt: at(7)}
	}
	update(t, st, func(tx host.Tx) error {
		for _, g := range []host.GoalState{
			goal(ws, active, host.GoalActive, long, "gop-a", 2),
			goal(ws, held, host.GoalActive, "held one", "gop-h", 3),
			goal(ws, oldFence, host.GoalActive, "moved on", "gop-n", 5),
			goal(ws, paused, host.GoalPaused, "paused one", "gop-p", 2),
			goal(ws, done, host.GoalAchieved, "done", "gop-d", 4),
			// Another workspace's goal on the same session id never leaks.
			goal(other, active, host.GoalPaused, "foreign", "gop-f", 9),
		} {
			if err := tx.PutGoal(c, g); err != nil {
				return err
			}
		}
		for _, f := range []host.GoalFence{fence(held, "gop-h", 3), fence(held, "gop-0", 1),
			fence(oldFence, "gop-m", 4), fence(paused, "gop-p", 2)} {
			if err := tx.InsertGoalFence(c, f); err != nil {
				return err
			}
		}
		// A fence of another workspace on the active session's identity.
		f := fence(active, "gop-a", 2)
		f.WorkspaceID = other
		return tx.InsertGoalFence(c, f)
	})
	want := map[string]*host.GoalSummary{
		active:   {Status: host.GoalActive, Objective: strings.Repeat("é", host.GoalSummaryObjectiveMax-1) + "…"},
		held:     {Status: host.GoalActive, Objective: "held one", Held: true},
		oldFence: {Status: host.GoalActive, Objective: "moved on"},
		paused:   {Status: host.GoalPaused, Objective: "paused one"},
		done:     nil,
		none:     nil,
	}
	check := func(what string, s host.Session) {
		t.Helper()
		w, ok := want[s.ID]
		if !ok {
			t.Fatalf("%s: unexpected session %s", what, s.ID)
		}
		if (w == nil) != (s.Goal == nil) || (w != nil && *w != *s.Goal) {
			t.Errorf("%s %s: goal = %+v, want %+v", what, s.ID, s.Goal, w)
		}
	}
	page, err := st.ListSessions(c, ws, host.SessionQuery{Limit: 50})
	noErr(t, "list", err)
	if len(page.Sessions) != len(want) {
		t.Fatalf("list: %d sessions, want %d", len(page.Sessions), len(want))
	}
	for _, s := range page.Sessions {
		check("list", s)
	}
	// A page boundary keeps each row's own summary.
	p1, err := st.ListSessions(c, ws, host.SessionQuery{Limit: 2})
	noErr(t, "list page 1", err)
	p2, err := st.ListSessions(c, ws, host.SessionQuery{Limit: 2, Cursor: p1.NextCursor})
	noErr(t, "list page 2", err)
	for _, s := range append(p1.Sessions, p2.Sessions...) {
		check("paged list", s)
	}
	for id := range want {
		s, err := st.GetSession(c, ws, id)
		noErr(t, "get", err)
		check("get", s)
	}
	ch, err := st.Changes(c, ws, held, host.ChangesQuery{})
	noErr(t, "changes", err)
	check("changes", ch.Session)
	s, err := st.GetSession(c, other, active)
	noErr(t, "foreign get", err)
	if s.Goal == nil || s.Goal.Objective != "foreign" || s.Goal.Held {
		t.Errorf("foreign session goal = %+v", s.Goal)
	}
}
