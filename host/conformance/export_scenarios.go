package conformance

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// Replay capture and restore (host/export.go): export → import into a
// fresh workspace → export again is byte-identical; identical re-import
// is a no-op; conflicts and bad documents are typed refusals that change
// nothing; nothing ever starts an agent.

const importWS = "ws-import"

// richSession builds a settled tree: text, a tool call, an answered
// permission (an interaction), a sub-agent child session, settings, pin.
func (f *fixture) richSession() host.Session {
	f.t.Helper()
	r, err := f.host.CreateSession(ctx, host.CreateSessionInput{WorkspaceID: ws, Title: "Export me",
		Settings: map[string]string{"model": "m1"}, CreatedBy: "alice"})
	if err != nil {
		f.t.Fatal(err)
	}
	sid := r.Session.ID
	f.settledTurns(sid, "/sim instant\nplain text with surrogates 😀", "/sim instant tool\nread a file")
	// A permission in the root, then one in a sub-agent child session.
	for _, p := range []string{"/sim instant permission\nedit", "/sim instant subagent\ndelegate"} {
		tr := f.mustSend(sid, fmt.Sprintf("export-%d", promptSeq.Add(1)), p)
		_, it := f.pendingPermission(sid)
		if _, err := f.respond(it, it.Options[0].ID, "alice", ""); err != nil {
			f.t.Fatalf("respond: %v", err)
		}
		f.waitSettled(tr)
	}
	pin := true
	if _, err := f.host.UpdateSession(ctx, host.UpdateSessionInput{WorkspaceID: ws, SessionID: sid, Pinned: &pin}); err != nil {
		f.t.Fatal(err)
	}
	s, err := f.host.GetSession(ctx, ws, sid)
	if err != nil {
		f.t.Fatal(err)
	}
	return s
}

func encode(t *testing.T, g host.SessionGraph) []byte {
	t.Helper()
	b, err := host.EncodeGraph(g)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var ExportImportRoundTrip = Scenario{Name: "export/import_into_a_fresh_workspace_is_byte_identical", Run: func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	src := f.richSession()
	g, err := host.CaptureSessionGraph(ctx, f.store, ws, src.ID)
	if err != nil {
		t.Fatalf("capture: %v", err)
	}
	if len(g.Sessions) < 2 || g.Sessions[0].ID != src.ID || g.Sessions[1].ParentID != src.ID {
		t.Fatalf("graph lacks the sub-agent hierarchy: %d sessions", len(g.Sessions))
	}
	root := g.Sessions[0]
	if !root.Pinned || root.Settings["model"] != "m1" || root.ProviderResumeCheckpoint == nil || len(root.Interactions) == 0 || len(root.Turns) != 4 {
		t.Fatalf("graph root incomplete: pinned=%v settings=%v checkpoint=%v interactions=%d turns=%d",
			root.Pinned, root.Settings, root.ProviderResumeCheckpoint, len(root.Interactions), len(root.Turns))
	}
	first := encode(t, g)
	if bytes.Contains(first, []byte(ws)) || bytes.Contains(first, []byte(`"createdBy"`)) {
		t.Fatalf("the graph names the workspace or the owner")
	}
	// The document decodes strictly and re-encodes to the same bytes.
	dg, err := host.DecodeGraph(first)
	if err != nil || !bytes.Equal(encode(t, dg), first) {
		t.Fatalf("decode/encode is not stable: %v", err)
	}

	dispatches := f.runtime.dispatches.Load()
	res, err := host.RestoreSessionGraph(ctx, f.store, host.RestoreGraphInput{WorkspaceID: importWS, UserID: "carol", Graph: dg})
	if err != nil || !res.Created || len(res.Sessions) != len(g.Sessions) {
		t.Fatalf("restore: %+v %v", res, err)
	}
	again, err := host.CaptureSessionGraph(ctx, f.store, importWS, src.ID)
	if err != nil {
		t.Fatalf("capture the import: %v", err)
	}
	if second := encode(t, again); !bytes.Equal(first, second) {
		t.Fatalf("export after import differs:\n%s\n----\n%s", first, second)
	}
	for _, id := range res.Sessions {
		s, err := f.host.GetSession(ctx, importWS, id)
		if err != nil || s.CreatedBy != "carol" || s.ActiveTurnID != "" {
			t.Fatalf("imported session %s: %+v %v", id, s, err)
		}
	}
	// Identical content for the same user again: a no-op.
	res2, err := host.RestoreSessionGraph(ctx, f.store, host.RestoreGraphInput{WorkspaceID: importWS, UserID: "carol", Graph: dg})
	if err != nil || res2.Created {
		t.Fatalf("idempotent restore: %+v %v", res2, err)
	}
	if f.runtime.dispatches.Load() != dispatches {
		t.Fatalf("restore sent a prompt to the agent")
	}
	// The source is untouched and the imported session reads like any other.
	if ms := f.messages(src.ID, host.MessageQuery{Limit: 1000}); len(ms) == 0 {
		t.Fatalf("source lost its messages")
	}
	if p, err := f.host.ListSessionMessages(ctx, importWS, src.ID, host.MessageQuery{Limit: 1000}); err != nil || len(p.Messages) != len(root.Messages) {
		t.Fatalf("imported messages: %d of %d (%v)", len(p.Messages), len(root.Messages), err)
	}

	// A fork carries its lineage: after import, forking it again in the
	// new workspace continues the family's numbering.
	fk, err := f.fork(src.ID, root.Turns[0].ID, "export-fork")
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	fg, err := host.CaptureSessionGraph(ctx, f.store, ws, fk.ID)
	if err != nil {
		t.Fatal(err)
	}
	if l := fg.Sessions[0].ForkedFrom; l == nil || l.SourceSessionID != src.ID || l.LineageSeq != 2 || l.BaseTitle != "Export me" {
		t.Fatalf("fork lineage in the graph: %+v", l)
	}
	if _, err := host.RestoreSessionGraph(ctx, f.store, host.RestoreGraphInput{WorkspaceID: importWS, UserID: "carol", Graph: fg}); err != nil {
		t.Fatalf("restore the fork: %v", err)
	}
	fg2, err := host.CaptureSessionGraph(ctx, f.store, importWS, fk.ID)
	if err != nil || !bytes.Equal(encode(t, fg), encode(t, fg2)) {
		t.Fatalf("the fork's export after import differs (%v)", err)
	}
	again3, err := f.host.ForkSession(ctx, host.ForkSessionInput{WorkspaceID: importWS, SessionID: fk.ID,
		TurnID: fg.Sessions[0].Turns[0].ID, ClientSubmitID: "fork-of-import"})
	if err != nil || again3.Title != "Export me (3)" {
		t.Fatalf("fork of the imported fork: %+v %v", again3, err)
	}
}}

var ImportConflictRejected = Scenario{Name: "export/import_conflicts_and_bad_documents_are_refused", Run: func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	src := f.createEmpty()
	f.settledTurns(src.ID, "/sim instant\nhello")
	g, err := host.CaptureSessionGraph(ctx, f.store, ws, src.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := host.RestoreSessionGraph(ctx, f.store, host.RestoreGraphInput{WorkspaceID: importWS, UserID: "carol", Graph: g}); err != nil {
		t.Fatal(err)
	}
	want := encode(t, g)

	changed := g
	changed.Sessions = append([]host.GraphSession(nil), g.Sessions...)
	changed.Sessions[0].Title = "Something else"
	_, err = host.RestoreSessionGraph(ctx, f.store, host.RestoreGraphInput{WorkspaceID: importWS, UserID: "carol", Graph: changed})
	wantReason(t, err, host.CodeOperationConflict, host.ReasonImportConflict)
	_, err = host.RestoreSessionGraph(ctx, f.store, host.RestoreGraphInput{WorkspaceID: importWS, UserID: "dave", Graph: g})
	wantReason(t, err, host.CodeOperationConflict, host.ReasonImportConflict)
	// Importing into the source's own workspace collides with the source.
	_, err = host.RestoreSessionGraph(ctx, f.store, host.RestoreGraphInput{WorkspaceID: ws, UserID: "carol", Graph: g})
	wantReason(t, err, host.CodeOperationConflict, host.ReasonImportConflict)

	bad := g
	bad.Version = 99
	_, err = host.RestoreSessionGraph(ctx, f.store, host.RestoreGraphInput{WorkspaceID: "ws-other", UserID: "carol", Graph: bad})
	wantReason(t, err, host.CodeInvalidInput, host.ReasonGraphInvalid)
	_, err = host.DecodeGraph([]byte(`{"format":"ensemble.session-graph","version":1,"sessions":[],"extra":1}`))
	wantReason(t, err, host.CodeInvalidInput, host.ReasonGraphInvalid)
	_, err = host.RestoreSessionGraph(ctx, f.store, host.RestoreGraphInput{WorkspaceID: "ws-other", UserID: "carol", Graph: host.SessionGraph{Format: host.GraphFormat, Version: host.GraphVersion}})
	wantReason(t, err, host.CodeInvalidInput, host.ReasonGraphInvalid)
	if p, _ := f.host.ListSessions(ctx, "ws-other", host.SessionQuery{}); len(p.Sessions) != 0 {
		t.Fatalf("a refused import wrote sessions")
	}
	// Nothing changed in the imported copy.
	have, err := host.CaptureSessionGraph(ctx, f.store, importWS, src.ID)
	if err != nil || !bytes.Equal(encode(t, have), want) {
		t.Fatalf("a refused import changed the workspace: %v", err)
	}

	// Unsettled sessions and foreign ids are not exported.
	hang := f.mustSend(src.ID, "exp-hang", "/sim hang")
	f.waitTurn(hang, "accepted", host.Turn.Accepted)
	_, err = host.CaptureSessionGraph(ctx, f.store, ws, src.ID)
	wantReason(t, err, host.CodeOperationConflict, host.ReasonNotSettled)
	_, err = host.CaptureSessionGraph(ctx, f.store, "ws-foreign", src.ID)
	wantCode(t, err, host.CodeNotFound)
	if _, err := f.host.CancelTurn(ctx, host.CancelInput{WorkspaceID: ws, SessionID: src.ID, TurnID: hang.ID}); err != nil {
		t.Fatal(err)
	}
	f.waitSettled(hang)
}}

// ExportImportGoalHeld: the graph carries the session's goal record and
// import restores it exactly (export → import → export is byte-identical).
// The exported goal is active (held by a delete/restore of the source), so
// the import must not arm it: the imported session starts no agent until
// a person resumes its goal there, which arms a new revision.
var ExportImportGoalHeld = Scenario{Name: "export/goal_round_trips_and_an_imported_active_goal_waits_for_resume", Run: func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	src := f.createEmpty()
	f.settledTurns(src.ID, "/sim instant\nbefore the goal")
	set := f.mustGoal(src.ID, "xg-1", host.GoalActionSet, &host.GoalSpec{Objective: "/sim hang\nPort the parser",
		Criteria: "all tests green", MaxTurns: 7, MaxDuration: "45m"}, "alice")
	f.waitGoalTurnRunning(src.ID)
	// Delete and restore: the goal turn ends, the goal stays active, held.
	f.del("alice", src.ID)
	f.restore(src.ID)
	want, err := f.store.GetGoal(ctx, ws, src.ID)
	if err != nil || want.Goal == nil || want.Goal.Status != host.GoalActive {
		t.Fatalf("source goal: %+v %v", want.Goal, err)
	}

	g, err := host.CaptureSessionGraph(ctx, f.store, ws, src.ID)
	if err != nil {
		t.Fatalf("capture: %v", err)
	}
	gg := g.Sessions[0].Goal
	if gg == nil || gg.Goal == nil || gg.Goal.Objective != "Port the parser" && gg.Goal.Objective != "/sim hang\nPort the parser" ||
		gg.Goal.OperationID != set.Operation.ID || gg.Goal.SetBy != "alice" || gg.Revision != want.Revision || gg.Seq != want.Seq ||
		gg.Goal.Criteria != "all tests green" || gg.Goal.MaxTurns != 7 || gg.Goal.TurnsUsed != want.Goal.TurnsUsed {
		t.Fatalf("graph goal = %+v / %+v, want %+v / %+v", gg, gg.Goal, want, want.Goal)
	}
	first := encode(t, g)
	dg, err := host.DecodeGraph(first)
	if err != nil || !bytes.Equal(encode(t, dg), first) {
		t.Fatalf("decode/encode is not stable: %v", err)
	}
	dispatches := f.runtime.dispatches.Load()
	if _, err := host.RestoreSessionGraph(ctx, f.store, host.RestoreGraphInput{WorkspaceID: importWS, UserID: "carol", Graph: dg}); err != nil {
		t.Fatalf("restore: %v", err)
	}
	again, err := host.CaptureSessionGraph(ctx, f.store, importWS, src.ID)
	if err != nil {
		t.Fatalf("capture the import: %v", err)
	}
	if second := encode(t, again); !bytes.Equal(first, second) {
		t.Fatalf("export after import differs:\n%s\n----\n%s", first, second)
	}
	got, err := f.host.GetGoal(ctx, importWS, src.ID)
	if err != nil || got.Goal == nil || got.Goal.Status != host.GoalActive || got.Revision != want.Revision || got.WorkspaceID != importWS || !got.Held {
		t.Fatalf("imported goal: %+v %v", got, err)
	}
	// The import's goal_state fact (in its outbox, for the relay) says
	// so: a watcher need not reload.
	rows, err := f.store.PendingFacts(ctx, time.Now().Add(time.Minute), 10000)
	if err != nil {
		t.Fatalf("pending facts: %v", err)
	}
	var heldFact bool
	for _, r := range rows {
		if fa := r.Fact; fa.Kind == host.FactGoalState && fa.WorkspaceID == importWS && fa.SessionID == src.ID && fa.Goal != nil {
			heldFact = fa.Goal.Held && fa.Goal.Seq == got.Seq
		}
	}
	if !heldFact {
		t.Fatalf("the import's goal_state fact is not held")
	}
	// Identical re-import is a no-op, with the goal.
	if r, err := host.RestoreSessionGraph(ctx, f.store, host.RestoreGraphInput{WorkspaceID: importWS, UserID: "carol", Graph: dg}); err != nil || r.Created {
		t.Fatalf("idempotent re-import: %+v %v", r, err)
	}
	// A changed goal is a conflict.
	changed := g
	changed.Sessions = append([]host.GraphSession(nil), g.Sessions...)
	cg := *gg
	cgoal := *gg.Goal
	cgoal.Objective = "something else"
	cg.Goal = &cgoal
	changed.Sessions[0].Goal = &cg
	_, err = host.RestoreSessionGraph(ctx, f.store, host.RestoreGraphInput{WorkspaceID: importWS, UserID: "carol", Graph: changed})
	wantReason(t, err, host.CodeOperationConflict, host.ReasonImportConflict)

	turns := len(g.Sessions[0].Turns)
	time.Sleep(1200 * time.Millisecond) // more than two goal worker passes
	if p, err := f.host.ListSessionTurns(ctx, importWS, src.ID, host.TurnQuery{Limit: 100}); err != nil || len(p.Turns) != turns {
		t.Fatalf("the imported goal armed a turn: %d turns (graph %d) %v", len(p.Turns), turns, err)
	}
	if f.runtime.dispatches.Load() != dispatches {
		t.Fatalf("import started the agent")
	}
	if after := encode(t, mustCapture(t, f, importWS, src.ID)); !bytes.Equal(first, after) {
		t.Fatalf("the goal loop changed the imported session")
	}
	// Resuming it in the new workspace arms a new revision.
	res, err := f.host.GoalControl(ctx, host.GoalControlInput{WorkspaceID: importWS, SessionID: src.ID,
		ClientSubmitID: "xg-resume", Action: host.GoalActionResume, By: "carol", ByName: "Carol"})
	if err != nil || res.Goal == nil || res.Goal.Revision != want.Revision+1 || res.Goal.Status != host.GoalActive {
		t.Fatalf("resume of the imported goal: %+v %v", res.Goal, err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		st, err := f.host.GetGoal(ctx, importWS, src.ID)
		if err == nil && st.Goal != nil && st.Goal.ActiveTurnID != "" {
			tu, err := f.host.GetTurn(ctx, importWS, src.ID, st.Goal.ActiveTurnID)
			if err != nil || tu.Goal == nil || tu.Goal.Kind != host.OriginGoalArm || tu.Goal.OperationID != res.Operation.ID {
				t.Fatalf("turn after resume: %+v %v", tu.Goal, err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the resumed imported goal never armed (%+v, %v)", st.Goal, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := f.host.GoalControl(ctx, host.GoalControlInput{WorkspaceID: importWS, SessionID: src.ID,
		ClientSubmitID: "xg-clear", Action: host.GoalActionClear, By: "carol"}); err != nil {
		t.Fatal(err)
	}
}}

func mustCapture(t *testing.T, f *fixture, w, sid string) host.SessionGraph {
	t.Helper()
	g, err := host.CaptureSessionGraph(ctx, f.store, w, sid)
	if err != nil {
		t.Fatalf("capture: %v", err)
	}
	return g
}
