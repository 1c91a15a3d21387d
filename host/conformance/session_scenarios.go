package conformance

import (
	"errors"
	"testing"

	"github.com/ensemble-dev/ensemble/host"
)

var CreateEmptySession = Scenario{"session/create_empty", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	if s.ID == "" || s.WorkspaceID != ws || s.RootID != s.ID || s.Title != "" || s.ActiveTurnID != "" {
		t.Fatalf("unexpected empty session: %+v", s)
	}
	got, err := f.host.GetSession(ctx, ws, s.ID)
	if err != nil || got.ID != s.ID {
		t.Fatalf("get: %+v %v", got, err)
	}
	page, err := f.host.ListSessions(ctx, ws, host.SessionQuery{})
	if err != nil || len(page.Sessions) != 1 || page.Sessions[0].ID != s.ID {
		t.Fatalf("list: %+v %v", page, err)
	}
	if turns, _ := f.host.ListSessionTurns(ctx, ws, s.ID, host.TurnQuery{}); len(turns.Turns) != 0 {
		t.Fatalf("an empty session has no turns, got %d", len(turns.Turns))
	}
}}

var CreateWithInitialContent = Scenario{"session/create_with_initial_content", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	r, err := f.host.CreateSession(ctx, host.CreateSessionInput{WorkspaceID: ws, ClientSubmitID: "c-1",
		Content: &host.MessageContent{Text: "Explain the build system"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Turn == nil || !r.Turn.Accepted() {
		t.Fatalf("initial turn not accepted: %+v", r.Turn)
	}
	if r.Session.Title != "Explain the build system" {
		t.Fatalf("title from the first prompt: got %q", r.Session.Title)
	}
	done := f.waitSettled(*r.Turn)
	if done.Outcome != host.OutcomeCompleted {
		t.Fatalf("outcome %q", done.Outcome)
	}
	ms := f.messages(r.Session.ID, host.MessageQuery{})
	if len(ms) < 2 || ms[0].Role != host.RoleUser || ms[0].Content.Text != "Explain the build system" || agentText(ms) == "" {
		t.Fatalf("transcript: %+v", ms)
	}
	// The same create retried returns the same session and turn, no dispatch.
	again, err := f.host.CreateSession(ctx, host.CreateSessionInput{WorkspaceID: ws, ClientSubmitID: "c-1",
		Content: &host.MessageContent{Text: "Explain the build system"}})
	if err != nil || again.Session.ID != r.Session.ID || again.Turn == nil || again.Turn.ID != r.Turn.ID {
		t.Fatalf("retry: %+v %v", again, err)
	}
	if n := f.runtime.dispatches.Load(); n != 1 {
		t.Fatalf("dispatches = %d, want 1", n)
	}
	_, err = f.host.CreateSession(ctx, host.CreateSessionInput{WorkspaceID: ws, ClientSubmitID: "c-1",
		Content: &host.MessageContent{Text: "something else"}})
	wantCode(t, err, host.CodeOperationConflict)
}}

var InitialContentInvisibleUntilDurable = Scenario{"session/initial_content_invisible_until_durable", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	hold, release := make(chan host.DispatchRequest, 1), make(chan struct{})
	f.runtime.set(func(r *probeRuntime) {
		r.beforeDispatch = func(req host.DispatchRequest) error { hold <- req; <-release; return nil }
	})
	type result struct {
		r   host.CreateSessionResult
		err error
	}
	out := make(chan result, 1)
	go func() {
		r, err := f.host.CreateSession(ctx, host.CreateSessionInput{WorkspaceID: ws, ClientSubmitID: "c-2",
			Content: &host.MessageContent{Text: "hello"}})
		out <- result{r, err}
	}()
	req := <-hold
	if _, err := f.host.GetSession(ctx, ws, req.Ref.SessionID); host.CodeOf(err) != host.CodeNotFound {
		t.Fatalf("a provisional session must be invisible, got %v", err)
	}
	if p, _ := f.host.ListSessions(ctx, ws, host.SessionQuery{}); len(p.Sessions) != 0 {
		t.Fatalf("a provisional session must not be listed: %+v", p.Sessions)
	}
	close(release)
	res := <-out
	if res.err != nil {
		t.Fatal(res.err)
	}
	if _, err := f.host.GetSession(ctx, ws, res.r.Session.ID); err != nil {
		t.Fatalf("visible once accepted: %v", err)
	}
}}

var FailedFirstDeliveryRollsBack = Scenario{"session/failed_first_delivery_rolls_back", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	f.runtime.set(func(r *probeRuntime) { r.startErr = errors.New("agent binary missing") })
	_, err := f.host.CreateSession(ctx, host.CreateSessionInput{WorkspaceID: ws, ClientSubmitID: "c-3",
		Content: &host.MessageContent{Text: "hello"}})
	wantCode(t, err, host.CodeUnavailable)
	if p, _ := f.host.ListSessions(ctx, ws, host.SessionQuery{}); len(p.Sessions) != 0 {
		t.Fatalf("the provisional shell must be rolled back: %+v", p.Sessions)
	}
	// Nothing was kept, so the same id can create once the agent works.
	f.runtime.set(func(r *probeRuntime) { r.startErr = nil })
	r, err := f.host.CreateSession(ctx, host.CreateSessionInput{WorkspaceID: ws, ClientSubmitID: "c-3",
		Content: &host.MessageContent{Text: "hello"}})
	if err != nil || r.Turn == nil {
		t.Fatalf("create after rollback: %+v %v", r, err)
	}
}}

var InitialRejectionStaysHistory = Scenario{"session/initial_rejection_stays_history", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	r, err := f.host.CreateSession(ctx, host.CreateSessionInput{WorkspaceID: ws, ClientSubmitID: "c-4",
		Content: &host.MessageContent{Text: "/sim fail"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Turn == nil || r.Turn.Outcome != host.OutcomeFailed || r.Turn.FailureReason != host.ReasonProviderRejected {
		t.Fatalf("an explicit rejection settles the turn failed: %+v", r.Turn)
	}
	if _, err := f.host.GetSession(ctx, ws, r.Session.ID); err != nil {
		t.Fatalf("the rejected session stays as history: %v", err)
	}
	again, err := f.host.CreateSession(ctx, host.CreateSessionInput{WorkspaceID: ws, ClientSubmitID: "c-4",
		Content: &host.MessageContent{Text: "/sim fail"}})
	if err != nil || again.Turn == nil || again.Turn.ID != r.Turn.ID {
		t.Fatalf("replay returns the failed turn: %+v %v", again, err)
	}
	if n := f.runtime.dispatches.Load(); n != 1 {
		t.Fatalf("dispatches = %d, want 1", n)
	}
}}

var TitleFromFirstEligiblePrompt = Scenario{"session/title_from_first_eligible_prompt", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	f.waitSettled(f.mustSend(s.ID, "t-1", "/sim words=3"))
	if got, _ := f.host.GetSession(ctx, ws, s.ID); got.Title != "" {
		t.Fatalf("a command-only prompt is not eligible, title %q", got.Title)
	}
	f.waitSettled(f.mustSend(s.ID, "t-2", "/sim words=3\n  Fix   the login bug  \nmore detail"))
	if got, _ := f.host.GetSession(ctx, ws, s.ID); got.Title != "Fix the login bug" {
		t.Fatalf("title %q", got.Title)
	}
	f.waitSettled(f.mustSend(s.ID, "t-3", "Another topic"))
	if got, _ := f.host.GetSession(ctx, ws, s.ID); got.Title != "Fix the login bug" {
		t.Fatalf("an established title stays, got %q", got.Title)
	}

	r, err := f.host.CreateSession(ctx, host.CreateSessionInput{WorkspaceID: ws, Title: "Release plan"})
	if err != nil {
		t.Fatal(err)
	}
	f.waitSettled(f.mustSend(r.Session.ID, "t-4", "Draft the notes"))
	if got, _ := f.host.GetSession(ctx, ws, r.Session.ID); got.Title != "Release plan" || !got.TitleExplicit {
		t.Fatalf("an explicit title is never overwritten: %+v", got)
	}
	title := "Renamed"
	if u, err := f.host.UpdateSession(ctx, host.UpdateSessionInput{WorkspaceID: ws, SessionID: s.ID, Title: &title}); err != nil || u.Title != title || !u.TitleExplicit {
		t.Fatalf("update title: %+v %v", u, err)
	}
}}
