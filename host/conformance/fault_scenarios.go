package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// The scenarios in this file pin issue 11: under each fault they assert the
// exact canonical state afterwards (turn phase and outcome, claim state,
// session busy or not) and how often the agent received the prompt.

// expectTurn checks a Turn's canonical phase, outcome and failure reason.
func (f *fixture) expectTurn(sessionID, turnID string, phase host.TurnPhase, outcome host.TurnOutcome, reason string) host.Turn {
	f.t.Helper()
	tr, err := f.host.GetTurn(ctx, ws, sessionID, turnID)
	if err != nil || tr.Phase != phase || tr.Outcome != outcome || tr.FailureReason != reason {
		f.t.Fatalf("turn %s: want %s/%s/%s, got %s/%s/%s (%v)", turnID, phase, outcome, reason,
			tr.Phase, tr.Outcome, tr.FailureReason, err)
	}
	return tr
}

// expectClaim checks the durable claim state of a ClientSubmitID.
func (f *fixture) expectClaim(id string, state host.ClaimState) host.SubmitClaim {
	f.t.Helper()
	c, err := f.store.GetClaim(ctx, ws, id)
	if err != nil || c.State != state {
		f.t.Fatalf("claim %s: want %s, got %+v (%v)", id, state, c, err)
	}
	return c
}

// expectBusy checks whether the session has an active Turn.
func (f *fixture) expectBusy(sessionID string, busy bool) {
	f.t.Helper()
	s, err := f.host.GetSession(ctx, ws, sessionID)
	if err != nil || (s.ActiveTurnID != "") != busy {
		f.t.Fatalf("session %s busy=%v, want %v (%v)", sessionID, s.ActiveTurnID != "", busy, err)
	}
}

// expectNoStreaming fails when a message of the session still streams.
func (f *fixture) expectNoStreaming(sessionID string) {
	f.t.Helper()
	for _, m := range f.messages(sessionID, host.MessageQuery{Limit: 1000}) {
		if m.Streaming {
			f.t.Fatalf("message %s of a settled turn is still streaming", m.ID)
		}
	}
}

// sendRefusedLocally sends id to the session while the runtime refuses
// its first dispatch locally (session busy, nothing sent) and later ones
// not, checks the refusal's error and returns the one Turn it admitted.
func (f *fixture) sendRefusedLocally(sessionID, id string) host.Turn {
	f.t.Helper()
	var once atomic.Bool
	f.runtime.set(func(r *probeRuntime) {
		r.beforeDispatch = func(host.DispatchRequest) error {
			if once.CompareAndSwap(false, true) {
				return &host.LocalError{Code: "session_busy", Message: "a prompt is already running"}
			}
			return nil
		}
	})
	_, err := f.send(sessionID, id, "/sim words=2")
	wantReason(f.t, err, host.CodeUnavailable, "session_busy")
	tr := f.turnsWithSubmitID(sessionID, id)
	if len(tr) != 1 {
		f.t.Fatalf("turns: %+v", tr)
	}
	return tr[0]
}

func wantReason(t *testing.T, err error, code host.Code, reason string) {
	t.Helper()
	var he *host.Error
	if !errors.As(err, &he) || he.Code != code || he.Reason != reason {
		t.Fatalf("want %s/%s, got %v", code, reason, err)
	}
}

// 1: the decline follow-up's id cannot be squatted by a client.
var ReservedIDSpace = Scenario{"faults/reserved_id_space_cannot_be_squatted", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	a, b := f.createEmpty(), f.createEmpty()
	tr := f.mustSend(a.ID, "rs-1", "/sim permission")
	_, it := f.pendingPermission(a.ID)
	id := host.DenyFollowUpPrefix + host.OperationIDFor(it.Ref())
	_, err := f.send(b.ID, id, "squat")
	wantReason(t, err, host.CodeInvalidInput, "reserved_id")
	_, err = f.send(b.ID, "ensemble:anything", "squat")
	wantReason(t, err, host.CodeInvalidInput, "reserved_id")
	_, err = f.host.CreateSession(ctx, host.CreateSessionInput{WorkspaceID: ws, ClientSubmitID: id,
		Content: &host.MessageContent{Text: "squat"}})
	wantReason(t, err, host.CodeInvalidInput, "reserved_id")
	if ts := f.turnsWithSubmitID(b.ID, id); len(ts) != 0 {
		t.Fatalf("a refused id admitted a turn: %+v", ts)
	}
	if r, err := f.respond(it, "reject", "alice", `{"message":"use the other file"}`); err != nil || r.Disposition != host.DispositionAnswered {
		t.Fatalf("respond: %+v %v", r, err)
	}
	f.waitSettled(tr)
	fu := f.waitSettled(f.waitFollowUp(a.ID, id))
	f.expectTurn(a.ID, fu.ID, host.PhaseSettled, host.OutcomeCompleted, "")
	f.expectClaim(id, host.ClaimAccepted)
	f.expectBusy(a.ID, false)
	if n := f.runtime.dispatches.Load(); n != 2 {
		t.Fatalf("the agent received %d prompts, want 2 (the prompt and the follow-up)", n)
	}
}}

// 2: a create retry never returns a session that is not visible.
var CreateRetryNeverInvisible = Scenario{"faults/create_retry_never_returns_an_invisible_session", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	held, release := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	f.runtime.set(func(r *probeRuntime) {
		r.beforeDispatch = func(host.DispatchRequest) error {
			if first.CompareAndSwap(false, true) {
				close(held)
				<-release
			}
			return nil
		}
	})
	in := host.CreateSessionInput{WorkspaceID: ws, ClientSubmitID: "cr-1", Content: &host.MessageContent{Text: "/sim words=2"}}
	type result struct {
		r   host.CreateSessionResult
		err error
	}
	done := make(chan result, 1)
	go func() { r, err := f.host.CreateSession(ctx, in); done <- result{r, err} }()
	<-held
	_, err := f.host.CreateSession(ctx, in)
	wantReason(t, err, host.CodeUnavailable, host.ReasonCreateInProgress)
	close(release)
	res := <-done
	if res.err != nil || res.r.Turn == nil {
		t.Fatalf("first create: %+v %v", res.r, res.err)
	}
	again, err := f.host.CreateSession(ctx, in)
	if err != nil || again.Session.ID != res.r.Session.ID || again.Turn == nil || again.Turn.ID != res.r.Turn.ID {
		t.Fatalf("retry after the first attempt: %+v %v", again, err)
	}
	if _, err := f.host.GetSession(ctx, ws, again.Session.ID); err != nil {
		t.Fatalf("the returned session is not visible: %v", err)
	}
	f.waitSettled(*res.r.Turn)
	f.expectTurn(res.r.Session.ID, res.r.Turn.ID, host.PhaseSettled, host.OutcomeCompleted, "")
	f.expectClaim("cr-1", host.ClaimAccepted)
	if n := f.runtime.dispatches.Load(); n != 1 {
		t.Fatalf("dispatches = %d, want 1", n)
	}
}}

// 3b: a prompt to a warm session is admitted already dispatched (one
// commit). When that commit's acknowledgement is lost and the claim
// cannot be read to confirm it either, the Turn was admitted and never
// sent: the same call or its retry sends it, exactly once, instead of
// answering with a dispatched Turn nothing drives.
var LostWarmAdmissionAck = Scenario{"faults/lost_warm_admission_ack_is_sent_once", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	f.waitSettled(f.mustSend(s.ID, "lw-0", "/sim words=1")) // the provider session is live now
	f.store.failClaimReads.Store(1)                         // the admission's confirmation
	f.sendLosingAck(s.ID, "lw-1", "/sim words=3")
	if n := f.runtime.dispatches.Load(); n != 2 {
		t.Fatalf("the agent received %d prompts, want 2", n)
	}
}}

// 3c: the same, when nobody retries and the claim stays unreadable for
// the whole call: the reconciler sends it.
var LostWarmAdmissionAckReconciled = Scenario{"faults/lost_warm_admission_ack_is_sent_by_the_reconciler", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	f.waitSettled(f.mustSend(s.ID, "lw-0", "/sim words=1"))
	done := f.waitSettled(f.loseWarmAdmissionAck(s.ID, "lw-2", "/sim words=3"))
	f.expectTurn(s.ID, done.ID, host.PhaseSettled, host.OutcomeCompleted, "")
	if n := f.runtime.dispatches.Load(); n != 2 {
		t.Fatalf("the agent received %d prompts, want 2", n)
	}
}}

// A prompt admitted to a live agent session whose admission's
// acknowledgement was lost is sent by the next retry or reconciler pass;
// cancelled before that, it is settled canceled and never sent.
var CancelUnsentPrompt = Scenario{"faults/cancel_of_an_unsent_prompt_never_sends_it", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	f.waitSettled(f.mustSend(s.ID, "cu-0", "/sim words=1"))
	// No reconciler pass of its own: one between the lost admission and
	// the cancel would send the prompt before it was cancelled.
	f.stopOps()
	tr := f.loseWarmAdmissionAck(s.ID, "cu-1", "/sim words=3")
	if _, err := f.host.CancelTurn(ctx, host.CancelInput{WorkspaceID: ws, SessionID: s.ID, TurnID: tr.ID, Wait: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	done := f.waitSettled(tr)
	if done.Outcome != host.OutcomeCanceled {
		t.Fatalf("turn: %+v, want canceled", done)
	}
	if n := f.runtime.dispatches.Load(); n != 1 {
		t.Fatalf("the agent received %d prompts, want 1: the cancelled one was never to be sent", n)
	}
	f.expectBusy(s.ID, false)
}}

// loseWarmAdmissionAck submits to a session whose agent is live with the
// admission's acknowledgement lost and its claim unreadable for the
// confirmation and the replay: the submit answers unavailable and the Turn,
// admitted dispatched, is left unsent. It returns that Turn.
func (f *fixture) loseWarmAdmissionAck(sessionID, id, text string) host.Turn {
	f.t.Helper()
	f.store.failClaimReads.Store(2) // the confirmation and the claim's replay
	f.store.onCommitted(firstOnly())
	_, err := f.send(sessionID, id, text)
	f.store.onCommitted(nil)
	wantCode(f.t, err, host.CodeUnavailable)
	return f.turnsWithSubmitID(sessionID, id)[0]
}

func (s *faultStore) GetClaim(ctx context.Context, ws, clientSubmitID string) (host.SubmitClaim, error) {
	if s.failClaimReads.Add(-1) >= 0 {
		return host.SubmitClaim{}, fmt.Errorf("conformance: store unreachable: %w", host.ErrUnavailable)
	}
	return s.Store.GetClaim(ctx, ws, clientSubmitID)
}

// 3: an admission whose acknowledgement is lost does not strand the session.
var LostAdmissionAck = Scenario{"faults/lost_admission_ack_never_strands_the_session", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	f.sendLosingAck(s.ID, "la-1", "/sim words=3")
	f.expectBusy(s.ID, false)
	if n := f.runtime.dispatches.Load(); n != 1 {
		t.Fatalf("dispatches = %d, want 1", n)
	}
	next := f.waitSettled(f.mustSend(s.ID, "la-2", "/sim words=1"))
	f.expectTurn(s.ID, next.ID, host.PhaseSettled, host.OutcomeCompleted, "")
}}

// sendLosingAck submits with the next commit's acknowledgement lost, then
// retries the same id: whatever the first answer, the retry returns the
// one Turn, and it completes with its claim accepted.
func (f *fixture) sendLosingAck(sessionID, id, text string) host.Turn {
	f.t.Helper()
	f.store.onCommitted(firstOnly())
	r, err := f.send(sessionID, id, text)
	f.store.onCommitted(nil)
	if err != nil && host.CodeOf(err) != host.CodeUnavailable {
		f.t.Fatalf("submit with a lost acknowledgement: %v", err)
	}
	again, err := f.send(sessionID, id, text)
	if err != nil || again.Turn == nil {
		f.t.Fatalf("retry: %+v %v", again, err)
	}
	if r.Turn != nil && r.Turn.ID != again.Turn.ID {
		f.t.Fatalf("retry returned another turn: %s vs %s", r.Turn.ID, again.Turn.ID)
	}
	done := f.waitSettled(*again.Turn)
	f.expectTurn(sessionID, done.ID, host.PhaseSettled, host.OutcomeCompleted, "")
	f.expectClaim(id, host.ClaimAccepted)
	return done
}

// 3/7: a Turn queued with a prepared claim is dispatched by the Host's
// reconciler exactly once, also after a restart, when nobody retries.
var QueuedTurnRedriven = Scenario{"faults/queued_turn_with_prepared_claim_is_redriven_once", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	f.runtime.set(func(r *probeRuntime) { r.startErr = errors.New("agent binary missing") })
	_, err := f.send(s.ID, "qr-1", "/sim words=2")
	wantReason(t, err, host.CodeUnavailable, host.ReasonRuntimeUnavailable)
	tr := f.turnsWithSubmitID(s.ID, "qr-1")
	if len(tr) != 1 {
		t.Fatalf("turns: %+v", tr)
	}
	f.expectTurn(s.ID, tr[0].ID, host.PhaseQueued, "", "")
	f.expectClaim("qr-1", host.ClaimPrepared)
	f.expectBusy(s.ID, true)

	// A restart (the new runtime works) must not settle it as unknown: it
	// was never sent. The new process's reconciler sends it once.
	rep := f.crash()
	if len(rep.SettledTurns) != 0 {
		t.Fatalf("recovery settled a turn that was never sent: %+v", rep.SettledTurns)
	}
	f.waitSettled(tr[0])
	f.expectTurn(s.ID, tr[0].ID, host.PhaseSettled, host.OutcomeCompleted, "")
	f.expectClaim("qr-1", host.ClaimAccepted)
	f.expectBusy(s.ID, false)
	r, err := f.send(s.ID, "qr-1", "/sim words=2")
	if err != nil || !r.Replayed || r.Turn.ID != tr[0].ID {
		t.Fatalf("retry after the redrive: %+v %v", r, err)
	}
	if n := f.runtime.dispatches.Load(); n != 1 {
		t.Fatalf("dispatches = %d, want 1", n)
	}
}}

// 7: unavailable before dispatch means "send the same request again", and
// the retry really sends it (once).
var BeforeDispatchRetryable = Scenario{"faults/before_dispatch_failure_leaves_the_claim_retryable", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	f.runtime.set(func(r *probeRuntime) { r.startErr = errors.New("agent binary missing") })
	_, err := f.send(s.ID, "br-1", "/sim words=2")
	wantCode(t, err, host.CodeUnavailable)
	if !host.CodeUnavailable.Retryable() {
		t.Fatal("unavailable must be retryable")
	}
	f.expectClaim("br-1", host.ClaimPrepared)
	f.runtime.set(func(r *probeRuntime) { r.startErr = nil })
	r, err := f.send(s.ID, "br-1", "/sim words=2")
	if err != nil || r.Turn == nil {
		t.Fatalf("retry: %+v %v", r, err)
	}
	f.waitSettled(*r.Turn)
	f.expectTurn(s.ID, r.Turn.ID, host.PhaseSettled, host.OutcomeCompleted, "")
	f.expectClaim("br-1", host.ClaimAccepted)
	f.expectBusy(s.ID, false)
	if n := f.runtime.dispatches.Load(); n != 1 {
		t.Fatalf("dispatches = %d, want 1", n)
	}
	if agentText(f.messages(s.ID, host.MessageQuery{TurnID: r.Turn.ID})) == "" {
		t.Fatal("the agent's answer is missing")
	}
}}

// 7: the decline follow-up meeting a transient failure is not consumed.
var FollowUpSurvivesTransientFailure = Scenario{"faults/decline_follow_up_survives_a_transient_failure", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	tr := f.mustSend(s.ID, "fu-1", "/sim permission")
	_, it := f.pendingPermission(s.ID)
	f.runtime.set(func(r *probeRuntime) { r.startErr = errors.New("agent restarting") })
	if r, err := f.respond(it, "reject", "alice", `{"message":"try again later"}`); err != nil || r.Disposition != host.DispositionAnswered {
		t.Fatalf("respond: %+v %v", r, err)
	}
	f.waitSettled(tr)
	id := host.DenyFollowUpPrefix + host.OperationIDFor(it.Ref())
	fu := f.waitFollowUp(s.ID, id)
	f.expectTurn(s.ID, fu.ID, host.PhaseQueued, "", "")
	f.expectClaim(id, host.ClaimPrepared)
	f.runtime.set(func(r *probeRuntime) { r.startErr = nil })
	fu = f.waitSettled(fu)
	f.expectTurn(s.ID, fu.ID, host.PhaseSettled, host.OutcomeCompleted, "")
	f.expectClaim(id, host.ClaimAccepted)
	f.expectBusy(s.ID, false)
	if ts := f.turnsWithSubmitID(s.ID, id); len(ts) != 1 {
		t.Fatalf("follow-up turns: %d", len(ts))
	}
	if n := f.runtime.dispatches.Load(); n != 2 {
		t.Fatalf("dispatches = %d, want 2", n)
	}
}}

// 4: a runtime-local refusal is not a provider rejection.
var LocalRefusalNotRejection = Scenario{"faults/runtime_local_busy_is_not_a_provider_rejection", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	tr := f.sendRefusedLocally(s.ID, "lr-1")
	if tr.Settled() {
		t.Fatalf("a local refusal settled the turn: %+v", tr)
	}
	f.expectClaim("lr-1", host.ClaimPrepared)
	done := f.waitSettled(tr)
	f.expectTurn(s.ID, done.ID, host.PhaseSettled, host.OutcomeCompleted, "")
	f.expectClaim("lr-1", host.ClaimAccepted)
	f.expectBusy(s.ID, false)
	if n := f.runtime.dispatches.Load(); n != 1 {
		t.Fatalf("the agent received the prompt %d times, want 1", n)
	}
}}

// 4b: the reconciler acts on the list its pass read, which can be a
// moment old: a Turn it saw dispatched may have been put back in the queue
// (a runtime-local refusal) and released by its dispatch since. It was
// never sent, so it is not settled execution_status_unknown; it stays
// queued and is sent once.
var StaleListKeepsRequeued = Scenario{"faults/reconciler_stale_list_does_not_settle_a_requeued_turn", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	tr := f.sendRefusedLocally(s.ID, "sl-1")
	if tr.Phase != host.PhaseQueued {
		t.Fatalf("turn after a local refusal: %+v", tr)
	}
	// Every pass now lists the Turn as its dispatch left it before the
	// refusal.
	f.store.listUnsettledAs(func(ts []host.Turn) []host.Turn {
		for i := range ts {
			if ts[i].ID == tr.ID {
				ts[i].Phase = host.PhaseDispatched
			}
		}
		return ts
	})
	if _, err := f.host.ReconcileTurns(ctx); err != nil {
		t.Fatal(err)
	}
	f.expectTurn(s.ID, tr.ID, host.PhaseQueued, "", "")
	f.expectClaim("sl-1", host.ClaimPrepared)
	f.store.listUnsettledAs(nil)
	done := f.waitSettled(tr)
	f.expectTurn(s.ID, done.ID, host.PhaseSettled, host.OutcomeCompleted, "")
	if n := f.runtime.dispatches.Load(); n != 1 {
		t.Fatalf("the agent received the prompt %d times, want 1", n)
	}
}}

// 5: a failed terminal write does not strand the turn; the runtime's
// authoritative terminal is written by the reconciler.
var TerminalWriteRetried = Scenario{"faults/failed_terminal_write_is_settled_by_the_reconciler", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	var fails atomic.Int64
	fails.Store(2)
	f.store.onTurnWrite(func(tr host.Turn) error {
		if tr.Phase == host.PhaseSettled && fails.Add(-1) >= 0 {
			return errors.New("conformance: disk full")
		}
		return nil
	})
	// Words 100 ms apart: the terminal comes after the acceptance, never
	// within it (Acceptance.More), so its own write is the one that fails.
	tr := f.mustSend(s.ID, "tw-1", "/sim words=3 rate=100ms")
	done := f.waitSettled(tr)
	f.expectTurn(s.ID, done.ID, host.PhaseSettled, host.OutcomeCompleted, "")
	f.expectBusy(s.ID, false)
	f.expectNoStreaming(s.ID)
	if fails.Load() >= 0 {
		t.Fatalf("the terminal write never failed (fault unused: %d)", fails.Load())
	}
	f.store.onTurnWrite(nil)
	next := f.waitSettled(f.mustSend(s.ID, "tw-2", "/sim words=1"))
	f.expectTurn(s.ID, next.ID, host.PhaseSettled, host.OutcomeCompleted, "")
}}

// 5: a turn no dispatch drives any more (delivery unknown, and its
// settlement write failed) is settled failed/execution_status_unknown by
// the reconciler; cancel records the intent and does not hang on it.
var OrphanTurnSettled = Scenario{"faults/turn_without_runtime_target_is_settled_unknown", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	f.store.onTurnWrite(func(tr host.Turn) error {
		if tr.Phase == host.PhaseSettled {
			return errors.New("conformance: constraint violated")
		}
		return nil
	})
	f.runtime.set(func(r *probeRuntime) {
		r.beforeDispatch = func(host.DispatchRequest) error { return errors.New("conformance: agent pipe broke") }
	})
	_, err := f.send(s.ID, "ot-1", "hello")
	wantCode(t, err, host.CodeOutcomeUnknown)
	tr := f.turnsWithSubmitID(s.ID, "ot-1")[0]
	res, err := f.host.CancelTurn(ctx, host.CancelInput{WorkspaceID: ws, SessionID: s.ID, TurnID: tr.ID})
	if err != nil || !res.IntentAccepted || res.Settled {
		t.Fatalf("cancel while the terminal write fails: %+v %v", res, err)
	}
	f.store.onTurnWrite(nil)
	f.waitSettled(tr)
	f.expectTurn(s.ID, tr.ID, host.PhaseSettled, host.OutcomeFailed, host.ReasonExecutionStatusUnknown)
	f.expectClaim("ot-1", host.ClaimPrepared)
	f.expectBusy(s.ID, false)
	if n := f.runtime.dispatches.Load(); n != 0 {
		t.Fatalf("dispatches = %d", n)
	}
}}

// 6: a cancel whose delivery failed is delivered again.
var CancelRedelivered = Scenario{"faults/failed_cancel_is_delivered_again", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	tr := f.mustSend(s.ID, "cr-2", "/sim hang")
	f.waitTurn(tr, "accepted", host.Turn.Accepted)
	f.runtime.set(func(r *probeRuntime) { r.failCancels = 2 })
	res, err := f.host.CancelTurn(ctx, host.CancelInput{WorkspaceID: ws, SessionID: s.ID, TurnID: tr.ID})
	if err != nil || !res.IntentAccepted || res.ProviderConfirmed {
		t.Fatalf("cancel with a lost delivery: %+v %v", res, err)
	}
	done := f.waitSettled(tr)
	f.expectTurn(s.ID, done.ID, host.PhaseSettled, host.OutcomeCanceled, "")
	f.expectBusy(s.ID, false)
	f.expectNoStreaming(s.ID)
	if n := f.runtime.cancels.Load(); n < 3 {
		t.Fatalf("cancel deliveries = %d, want the two failures and one success", n)
	}
	// Settled first: a later cancel is a no-op that reaches nobody.
	before := f.runtime.cancels.Load()
	res, err = f.host.CancelTurn(ctx, host.CancelInput{WorkspaceID: ws, SessionID: s.ID, TurnID: tr.ID})
	if err != nil || !res.Settled || f.runtime.cancels.Load() != before {
		t.Fatalf("cancel after settlement: %+v %v", res, err)
	}
}}

// 8: the create digest covers settings.
var CreateDigestCoversSettings = Scenario{"faults/create_digest_covers_settings", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	in := host.CreateSessionInput{WorkspaceID: ws, ClientSubmitID: "cd-1", Settings: map[string]string{"cwd": "/srv/a"}}
	first, err := f.host.CreateSession(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	in.Settings = map[string]string{"cwd": "/srv/b"}
	_, err = f.host.CreateSession(ctx, in)
	wantReason(t, err, host.CodeOperationConflict, "client_submit_id_reused")
	in.Settings = map[string]string{"cwd": "/srv/a"}
	again, err := f.host.CreateSession(ctx, in)
	if err != nil || again.Session.ID != first.Session.ID {
		t.Fatalf("same request replays: %+v %v", again, err)
	}
}}

// 11: recovery closes every open message of the turns it settles.
var RecoveryClosesMessages = Scenario{"faults/recovery_closes_open_messages", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	tr := f.mustSend(s.ID, "rc-1", "/sim hang")
	f.waitTurn(tr, "streaming", func(host.Turn) bool {
		for _, m := range f.messages(s.ID, host.MessageQuery{TurnID: tr.ID}) {
			if m.Streaming {
				return true
			}
		}
		return false
	})
	f.crash()
	f.expectTurn(s.ID, tr.ID, host.PhaseSettled, host.OutcomeFailed, host.ReasonExecutionStatusUnknown)
	f.expectBusy(s.ID, false)
	f.expectNoStreaming(s.ID)
}}

// 15: unavailable names what is unavailable.
var UnavailableHasReason = Scenario{"faults/unavailable_carries_a_reason", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	tr := f.mustSend(s.ID, "ur-1", "/sim hang")
	f.waitTurn(tr, "accepted", host.Turn.Accepted)
	f.store.onTurnWrite(func(host.Turn) error { return host.ErrUnavailable })
	_, err := f.host.CancelTurn(ctx, host.CancelInput{WorkspaceID: ws, SessionID: s.ID, TurnID: tr.ID})
	wantReason(t, err, host.CodeUnavailable, host.ReasonStoreUnavailable)
	f.store.onTurnWrite(nil)
	res, err := f.host.CancelTurn(ctx, host.CancelInput{WorkspaceID: ws, SessionID: s.ID, TurnID: tr.ID, Wait: 10 * time.Second})
	if err != nil || !res.Settled {
		t.Fatalf("cancel once the store is back: %+v %v", res, err)
	}
}}

// waitContextLost waits until the session is marked ContextLost.
func (f *fixture) waitContextLost(sessionID string) {
	f.t.Helper()
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if s, err := f.host.GetSession(ctx, ws, sessionID); err == nil && s.ContextLost {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("session %s never marked context_lost", sessionID)
		}
	}
}

// sendAfterContextLoss submits to a session whose agent forgot it (the
// runtime restarted): the submission is refused as not dispatched with
// reason context_lost and stays queued; the member's explicit choice sends
// it into a fresh agent session. It returns the Turn.
func (f *fixture) sendAfterContextLoss(sessionID, id, text string) host.Turn {
	f.t.Helper()
	_, err := f.send(sessionID, id, text)
	wantReason(f.t, err, host.CodeNotDispatched, host.ReasonContextLost)
	f.waitContextLost(sessionID)
	ts := f.turnsWithSubmitID(sessionID, id)
	if len(ts) != 1 || ts[0].Phase != host.PhaseQueued {
		f.t.Fatalf("the refused submission must stay queued: %+v", ts)
	}
	s, err := f.host.ContinueFresh(ctx, host.ContinueFreshInput{WorkspaceID: ws, SessionID: sessionID})
	if err != nil || s.ContextLost {
		f.t.Fatalf("continue fresh: %+v %v", s, err)
	}
	return ts[0]
}

// 9: an agent session that cannot be loaded is never replaced silently;
// the session says so and a member chooses to continue fresh.
var ContextLostIsExplicit = Scenario{"faults/lost_agent_context_is_explicit", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	first := f.waitSettled(f.mustSend(s.ID, "cl-1", "/sim words=2"))
	before, _ := f.host.GetSession(ctx, ws, s.ID)
	f.crash() // the new runtime's agent does not know the provider session
	_, err := f.send(s.ID, "cl-2", "do you remember?")
	wantReason(t, err, host.CodeNotDispatched, host.ReasonContextLost)
	got, err := f.host.GetSession(ctx, ws, s.ID)
	if err != nil || !got.ContextLost || got.ProviderSessionID != before.ProviderSessionID {
		t.Fatalf("session after a failed load: %+v %v", got, err)
	}
	tr := f.turnsWithSubmitID(s.ID, "cl-2")[0]
	f.expectTurn(s.ID, tr.ID, host.PhaseQueued, "", "")
	f.expectClaim("cl-2", host.ClaimPrepared)
	f.expectBusy(s.ID, true)
	// Neither the reconciler nor a retry sends it behind the user's back.
	if _, err := f.host.ReconcileTurns(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = f.send(s.ID, "cl-2", "do you remember?")
	wantReason(t, err, host.CodeNotDispatched, host.ReasonContextLost)
	if n := f.runtime.dispatches.Load(); n != 0 {
		t.Fatalf("sent %d times without the member's choice", n)
	}
	fresh, err := f.host.ContinueFresh(ctx, host.ContinueFreshInput{WorkspaceID: ws, SessionID: s.ID})
	if err != nil || fresh.ContextLost {
		t.Fatalf("continue fresh: %+v %v", fresh, err)
	}
	done := f.waitSettled(tr)
	f.expectTurn(s.ID, done.ID, host.PhaseSettled, host.OutcomeCompleted, "")
	f.expectClaim("cl-2", host.ClaimAccepted)
	f.expectBusy(s.ID, false)
	after, _ := f.host.GetSession(ctx, ws, s.ID)
	if after.ContextLost || after.ProviderSessionID == "" || after.ProviderSessionID == before.ProviderSessionID {
		t.Fatalf("session after continuing fresh: %+v", after)
	}
	if n := f.runtime.dispatches.Load(); n != 1 {
		t.Fatalf("dispatches = %d, want 1", n)
	}
	// The history stays in the transcript.
	if len(f.messages(s.ID, host.MessageQuery{TurnID: first.ID})) == 0 {
		t.Fatal("the earlier transcript is gone")
	}
}}

// 10: the provider identity of an ACP Turn is Ensemble's own correlation
// id, bound to the agent's session id and the exact prompt request; the
// sub-agent's is bound to its parent's.
var HonestProviderIdentity = Scenario{"faults/provider_identity_is_an_honest_correlation_id", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	a := f.waitSettled(f.mustSend(s.ID, "pi-1", "/sim words=2"))
	b := f.waitSettled(f.mustSend(s.ID, "pi-2", "/sim words=2"))
	for _, tr := range []host.Turn{a, b} {
		prefix := "ensemble:" + tr.ProviderSessionID + ":"
		if tr.ProviderSessionID == "" || !strings.HasPrefix(tr.ProviderTurnID, prefix) || len(tr.ProviderTurnID) == len(prefix) {
			t.Fatalf("turn %s provider identity %q/%q is not ensemble:<agent session>:<prompt request id>", tr.ID, tr.ProviderSessionID, tr.ProviderTurnID)
		}
	}
	if a.ProviderTurnID == b.ProviderTurnID {
		t.Fatalf("two prompts share the provider identity %q", a.ProviderTurnID)
	}
}}

// 6: a cancel intent that never reached the agent survives a restart: the
// restart ends the agent's work, recovery settles the Turn without
// guessing (not "canceled": nobody confirmed that), the intent stays on
// record, and a later cancel is a no-op.
var CancelIntentSurvivesRestart = Scenario{"faults/undelivered_cancel_survives_a_restart", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	tr := f.mustSend(s.ID, "cs-1", "/sim hang")
	f.waitTurn(tr, "accepted", host.Turn.Accepted)
	f.runtime.set(func(r *probeRuntime) { r.failCancels = 1 << 20 })
	res, err := f.host.CancelTurn(ctx, host.CancelInput{WorkspaceID: ws, SessionID: s.ID, TurnID: tr.ID})
	if err != nil || !res.IntentAccepted || res.ProviderConfirmed || res.Settled {
		t.Fatalf("cancel that cannot be delivered: %+v %v", res, err)
	}
	f.crash()
	got := f.expectTurn(s.ID, tr.ID, host.PhaseSettled, host.OutcomeFailed, host.ReasonExecutionStatusUnknown)
	if !got.CancelRequested {
		t.Fatalf("the cancel intent was lost across the restart: %+v", got)
	}
	f.expectBusy(s.ID, false)
	f.expectNoStreaming(s.ID)
	before := f.runtime.cancels.Load()
	res, err = f.host.CancelTurn(ctx, host.CancelInput{WorkspaceID: ws, SessionID: s.ID, TurnID: tr.ID})
	if err != nil || !res.Settled || f.runtime.cancels.Load() != before {
		t.Fatalf("cancel after settlement: %+v %v", res, err)
	}
}}
