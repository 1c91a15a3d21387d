package conformance

import (
	"strings"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

var RecoverSettlesUnsettled = Scenario{"recovery/unsettled_turn_becomes_execution_status_unknown", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	f.waitSettled(f.mustSend(s.ID, "r-1", "/sim words=4"))
	live := f.mustSend(s.ID, "r-2", "/sim hang")
	before := f.messages(s.ID, host.MessageQuery{})

	rep := f.crash()
	if len(rep.SettledTurns) != 1 || rep.SettledTurns[0].TurnID != live.ID {
		t.Fatalf("report: %+v", rep)
	}
	tr, err := f.host.GetTurn(ctx, ws, s.ID, live.ID)
	if err != nil || tr.Outcome != host.OutcomeFailed || tr.FailureReason != host.ReasonExecutionStatusUnknown {
		t.Fatalf("after recovery: %+v %v", tr, err)
	}
	after := f.messages(s.ID, host.MessageQuery{})
	if len(after) < len(before) {
		t.Fatalf("transcript lost messages: %d before, %d after", len(before), len(after))
	}
	for i, m := range before {
		// Output committed between the snapshot and the crash may extend a
		// message; nothing seen before may be lost or rewritten.
		if after[i].ID != m.ID || !strings.HasPrefix(after[i].Content.Text, m.Content.Text) {
			t.Fatalf("message %s lost or rewritten across recovery", m.ID)
		}
	}
	if got, _ := f.host.GetSession(ctx, ws, s.ID); got.ActiveTurnID != "" {
		t.Fatalf("session still busy after recovery: %+v", got)
	}
	next := f.waitSettled(f.sendAfterContextLoss(s.ID, "r-3", "hello again"))
	if next.Outcome != host.OutcomeCompleted {
		t.Fatalf("new prompt after recovery: %+v", next)
	}
	// The retried old id returns its failed turn; nothing is redispatched.
	r, err := f.send(s.ID, "r-2", "/sim hang")
	if err != nil || r.Turn.ID != live.ID || r.Turn.Outcome != host.OutcomeFailed {
		t.Fatalf("retry of the recovered id: %+v %v", r, err)
	}
	if n := f.runtime.dispatches.Load(); n != 1 {
		t.Fatalf("dispatches after restart = %d, want 1 (only the new prompt)", n)
	}
}}

var RecoverNeverRedispatchesPrepared = Scenario{"recovery/prepared_claim_is_never_redispatched", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	held, release := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(release) })
	f.runtime.set(func(r *probeRuntime) {
		r.beforeDispatch = func(host.DispatchRequest) error {
			close(held)
			<-release // the process "dies" here, before the provider sees the prompt
			return errf("process gone")
		}
	})
	go func() { _, _ = f.send(s.ID, "r-4", "hello") }()
	<-held

	f.crash()
	turns, _ := f.host.ListSessionTurns(ctx, ws, s.ID, host.TurnQuery{})
	if len(turns.Turns) != 1 || turns.Turns[0].Outcome != host.OutcomeFailed || turns.Turns[0].FailureReason != host.ReasonExecutionStatusUnknown {
		t.Fatalf("the interrupted turn: %+v", turns.Turns)
	}
	r, err := f.send(s.ID, "r-4", "hello")
	if err != nil || r.Turn.ID != turns.Turns[0].ID || !r.Replayed {
		t.Fatalf("retry: %+v %v", r, err)
	}
	if n := f.runtime.dispatches.Load(); n != 0 {
		t.Fatalf("a prepared claim was redispatched %d times", n)
	}
}}

var RecoverQuarantinesPoison = Scenario{"recovery/poisoned_record_is_quarantined_not_fatal", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	a, b := f.createEmpty(), f.createEmpty()
	ta := f.mustSend(a.ID, "r-5", "/sim hang")
	tb := f.mustSend(b.ID, "r-6", "/sim hang")
	// The turn's output commits rewrite its row: corrupt it only once the
	// agent is hanging and writes nothing more.
	f.waitAgentText(a.ID, "until cancelled (simulated).")
	d.CorruptTurn(t, f.store.Store, host.TurnRef{WorkspaceID: ws, SessionID: a.ID, TurnID: ta.ID})

	rep := f.crash()
	if len(rep.Quarantined) != 1 || rep.Quarantined[0].Kind != "turn" {
		t.Fatalf("quarantined: %+v", rep.Quarantined)
	}
	if len(rep.SettledTurns) != 1 || rep.SettledTurns[0].TurnID != tb.ID {
		t.Fatalf("the healthy turn must still be recovered: %+v", rep.SettledTurns)
	}
	got, err := f.host.GetTurn(ctx, ws, b.ID, tb.ID)
	if err != nil || got.FailureReason != host.ReasonExecutionStatusUnknown {
		t.Fatalf("healthy turn: %+v %v", got, err)
	}
	// A second start does not trip over the quarantined record again.
	if rep := f.crash(); len(rep.Quarantined) != 0 || len(rep.SettledTurns) != 0 {
		t.Fatalf("second recovery: %+v", rep)
	}
	if next := f.waitSettled(f.sendAfterContextLoss(b.ID, "r-7", "/sim words=2")); next.Outcome != host.OutcomeCompleted {
		t.Fatalf("work continues: %+v", next)
	}
}}

var ObserverFailure = Scenario{"commit/observer_failure_never_changes_result", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	f.host.FlushPublish()
	seen := f.obs.count(s.ID)
	f.obs.fail.Store(true)
	tr := f.waitSettled(f.mustSend(s.ID, "o-1", "/sim words=3"))
	if tr.Outcome != host.OutcomeCompleted {
		t.Fatalf("turn with a failing observer: %+v", tr)
	}
	f.host.FlushPublish() // publication is asynchronous
	if n := f.obs.count(s.ID); n != seen {
		t.Fatalf("observer recorded %d facts while down", n-seen)
	}
	f.obs.fail.Store(false)
	f.clock.Advance(time.Minute) // past the relay delay
	if err := f.host.RelayOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if n := f.obs.count(s.ID); n == seen {
		t.Fatal("the outbox relay must republish the facts the fast path missed")
	}
	published := f.obs.count(s.ID)
	if err := f.host.RelayOnce(ctx); err != nil || f.obs.count(s.ID) != published {
		t.Fatalf("relayed facts are marked published, not sent again (%d then %d)", published, f.obs.count(s.ID))
	}
}}
