package conformance

import (
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

var CancelSeparateFacts = Scenario{"cancel/intent_confirmation_settlement_are_separate", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	tr := f.mustSend(s.ID, "x-1", "/sim hang")
	res, err := f.host.CancelTurn(ctx, host.CancelInput{WorkspaceID: ws, SessionID: s.ID, TurnID: tr.ID, Wait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IntentAccepted || !res.ProviderConfirmed || !res.Settled || res.Turn.Outcome != host.OutcomeCanceled {
		t.Fatalf("cancel of a live turn: %+v", res)
	}
	if got, _ := f.host.GetSession(ctx, ws, s.ID); got.ActiveTurnID != "" {
		t.Fatalf("a settled turn releases the session: %+v", got)
	}
	// Cancelling again is idempotent and preserves the outcome.
	again, err := f.host.CancelTurn(ctx, host.CancelInput{WorkspaceID: ws, SessionID: s.ID, TurnID: tr.ID})
	if err != nil || !again.Settled || again.Turn.Outcome != host.OutcomeCanceled || again.ProviderConfirmed {
		t.Fatalf("second cancel: %+v %v", again, err)
	}
}}

var CancelAfterCompletion = Scenario{"cancel/after_completion_preserves_outcome", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	tr := f.waitSettled(f.mustSend(s.ID, "x-2", "/sim words=2"))
	res, err := f.host.CancelTurn(ctx, host.CancelInput{WorkspaceID: ws, SessionID: s.ID, TurnID: tr.ID, Wait: time.Second})
	if err != nil || !res.Settled || res.Turn.Outcome != host.OutcomeCompleted || res.ProviderConfirmed {
		t.Fatalf("cancel after completion: %+v %v", res, err)
	}
	_, err = f.host.CancelTurn(ctx, host.CancelInput{WorkspaceID: ws, SessionID: s.ID, TurnID: "turn_missing"})
	wantCode(t, err, host.CodeNotFound)
}}

var CancelWithoutWait = Scenario{"cancel/without_wait_reports_unsettled_intent", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	tr := f.mustSend(s.ID, "x-3", "/sim hang")
	res, err := f.host.CancelTurn(ctx, host.CancelInput{WorkspaceID: ws, SessionID: s.ID, TurnID: tr.ID})
	if err != nil || !res.IntentAccepted {
		t.Fatalf("cancel: %+v %v", res, err)
	}
	// Settlement is a separate fact that arrives later.
	done := f.waitSettled(tr)
	if done.Outcome != host.OutcomeCanceled || !done.CancelRequested {
		t.Fatalf("settled: %+v", done)
	}
}}
