package conformance

import (
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// Labels are display facts recorded when they happen: reading them back
// later (after other turns, on another replica, after a restart) gives the
// names and agent of that moment, never today's configuration.

var LabelsNamesAndAgent = Scenario{"labels/author_stopper_and_agent_recorded_on_turn", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	r, err := f.host.SendInput(ctx, host.SendInput{WorkspaceID: ws, SessionID: s.ID, ClientSubmitID: "l-1",
		Content: host.MessageContent{Text: "/sim hang"}, SubmittedBy: "alice", SubmittedByName: "Alice Liddell"})
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	tr := *r.Turn
	want := f.runtime.Describe()
	if tr.SubmittedByName != "Alice Liddell" || tr.Agent == nil || *tr.Agent != want {
		t.Fatalf("admitted turn labels: %+v (agent %+v, want %+v)", tr.TurnLabels, tr.Agent, want)
	}
	res, err := f.host.CancelTurn(ctx, host.CancelInput{WorkspaceID: ws, SessionID: s.ID, TurnID: tr.ID,
		Wait: 10 * time.Second, By: "bob", ByName: "Bob"})
	if err != nil || !res.Settled {
		t.Fatalf("cancel: %+v %v", res, err)
	}
	f.crash() // labels are durable, not process memory
	got, err := f.host.GetTurn(ctx, ws, s.ID, tr.ID)
	if err != nil {
		t.Fatalf("get turn: %v", err)
	}
	if got.SubmittedByName != "Alice Liddell" || got.CanceledBy != "bob" || got.CanceledByName != "Bob" ||
		got.Agent == nil || got.Agent.Name != want.Name || got.Agent.Simulated != want.Simulated {
		t.Fatalf("stored turn labels: %+v agent %+v", got.TurnLabels, got.Agent)
	}
	var prompt *host.Message
	for _, m := range f.messages(s.ID, host.MessageQuery{}) {
		if m.Role == host.RoleUser && m.TurnID == tr.ID {
			prompt = &m
		}
	}
	if prompt == nil || prompt.Author != "alice" || prompt.AuthorName != "Alice Liddell" {
		t.Fatalf("user message author: %+v", prompt)
	}
	// A later cancel of the settled turn by someone else changes nothing.
	if _, err := f.host.CancelTurn(ctx, host.CancelInput{WorkspaceID: ws, SessionID: s.ID, TurnID: tr.ID, By: "carol", ByName: "Carol"}); err != nil {
		t.Fatalf("cancel again: %v", err)
	}
	if again, _ := f.host.GetTurn(ctx, ws, s.ID, tr.ID); again.CanceledBy != "bob" {
		t.Fatalf("the first stopper stands: %+v", again.TurnLabels)
	}
}}

var InteractionHistoryDurable = Scenario{"interactions/history_keeps_every_turn_with_who_answered", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	var answered []host.Interaction
	for i, user := range []string{"alice", "bob"} {
		tr := f.mustSend(s.ID, "h-"+user, "/sim permission")
		_, it := f.pendingPermission(s.ID)
		if it.TurnID != tr.ID {
			t.Fatalf("turn %d: pending interaction of turn %s", i, it.TurnID)
		}
		if _, err := f.respond(it, "allow", user, ""); err != nil {
			t.Fatalf("respond: %v", err)
		}
		f.waitSettled(tr)
		answered = append(answered, f.waitResolved(it.Ref()))
	}
	// A third turn withdraws nothing and asks nothing: the latest tree is
	// empty, the history still has both answers.
	f.waitSettled(f.mustSend(s.ID, "h-3", "plain"))
	if tree, err := f.host.GetSessionInteractionTreeSnapshot(ctx, ws, s.ID); err != nil || len(tree.Interactions) != 0 {
		t.Fatalf("latest tree: %+v %v", tree, err)
	}
	hist, err := f.host.ListTurnInteractions(ctx, ws, s.ID, 1, 3)
	if err != nil {
		t.Fatalf("history: %v", err)
	}
	if len(hist) != 2 {
		t.Fatalf("history has %d interactions, want 2: %+v", len(hist), hist)
	}
	for i, h := range hist {
		if h.Ref() != answered[i].Ref() || h.AnsweredBy != answered[i].AnsweredBy || h.AnsweredByName == "" || h.Response == nil {
			t.Fatalf("history[%d] = %+v, want %+v", i, h, answered[i])
		}
	}
	if only, err := f.host.ListTurnInteractions(ctx, ws, s.ID, 2, 2); err != nil || len(only) != 1 || only[0].AnsweredBy != "bob" {
		t.Fatalf("seq range 2..2: %+v %v", only, err)
	}
	// Scoped by workspace: another workspace cannot read it.
	_, err = f.host.ListTurnInteractions(ctx, "ws-other", s.ID, 1, 3)
	wantCode(t, err, host.CodeNotFound)
}}
