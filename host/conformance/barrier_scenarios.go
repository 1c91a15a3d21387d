package conformance

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/ensemble-dev/ensemble/host"
)

// barrierProbe wraps a sink and checks, at each call, what is canonical.
type barrierProbe struct {
	host.TurnSink
	f   *fixture
	ref host.TurnRef

	mu       sync.Mutex
	phases   []host.TurnPhase
	early    error // result of an Output tried before acceptance
	agentMsg int   // agent messages canonical when Accepted was called
	outputs  int
	bad      []string
}

func (p *barrierProbe) turn() host.Turn {
	t, _ := p.f.store.GetTurn(context.Background(), p.ref.WorkspaceID, p.ref.SessionID, p.ref.TurnID)
	return t
}

func (p *barrierProbe) Observed(ctx context.Context, phase host.TurnPhase) error {
	err := p.TurnSink.Observed(ctx, phase)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.phases = append(p.phases, p.turn().Phase)
	if phase == host.PhaseResolvingIdentity || phase == host.PhaseProviderObserved {
		// A runtime that leaks output before acceptance must be refused.
		p.early = p.TurnSink.Output(ctx, host.OutputEvent{Key: "leak", Kind: host.KindText, Text: "leaked"})
	}
	return err
}

func (p *barrierProbe) Accepted(ctx context.Context, a host.Acceptance) error {
	page, _ := p.f.store.ListMessages(ctx, p.ref.WorkspaceID, p.ref.SessionID, host.MessageQuery{})
	p.mu.Lock()
	for _, m := range page.Messages {
		if m.Role == host.RoleAgent {
			p.agentMsg++
		}
	}
	p.outputs += len(a.Output) // held output commits with the acceptance
	p.mu.Unlock()
	seeMore(&a, func(evs []host.OutputEvent) {
		p.mu.Lock()
		p.outputs += len(evs)
		p.mu.Unlock()
	})
	return p.TurnSink.Accepted(ctx, a)
}

func (p *barrierProbe) Output(ctx context.Context, ev host.OutputEvent) error {
	t := p.turn()
	p.mu.Lock()
	p.outputs++
	if t.Phase != host.PhaseDurablyAccepted || t.ProviderTurnID == "" {
		p.bad = append(p.bad, string(t.Phase))
	}
	p.mu.Unlock()
	return p.TurnSink.Output(ctx, ev)
}

var AcceptanceBarrier = Scenario{"barrier/no_output_before_identity_is_bound", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	var probe *barrierProbe
	f.runtime.set(func(r *probeRuntime) {
		r.wrapSink = func(k host.TurnSink) host.TurnSink { probe.TurnSink = k; return probe }
		r.beforeDispatch = func(req host.DispatchRequest) error {
			probe = &barrierProbe{f: f, ref: req.Ref}
			return nil
		}
	})
	tr := f.waitSettled(f.mustSend(s.ID, "b-1", "/sim words=20 tool"))
	probe.mu.Lock()
	defer probe.mu.Unlock()
	if tr.Outcome != host.OutcomeCompleted || tr.ProviderSessionID == "" || tr.ProviderTurnID == "" {
		t.Fatalf("settled turn must keep its provider identity: %+v", tr)
	}
	if probe.outputs == 0 || len(probe.bad) > 0 {
		t.Fatalf("outputs %d, outputs before acceptance in phases %v", probe.outputs, probe.bad)
	}
	if probe.agentMsg != 0 {
		t.Fatalf("%d agent messages were canonical before acceptance", probe.agentMsg)
	}
	if probe.early == nil {
		t.Fatal("output reported before acceptance was accepted by the Host")
	}
	for i := 1; i < len(probe.phases); i++ {
		if rank(probe.phases[i]) < rank(probe.phases[i-1]) {
			t.Fatalf("phases moved backwards: %v", probe.phases)
		}
	}
	if len(probe.phases) == 0 || probe.phases[0] != host.PhaseDispatched {
		t.Fatalf("first observed canonical phase should be dispatched: %v", probe.phases)
	}
	for _, m := range f.messages(s.ID, host.MessageQuery{}) {
		if m.Content.Text == "leaked" {
			t.Fatal("leaked pre-acceptance output became canonical")
		}
	}
	if tools := countKind(f.messages(s.ID, host.MessageQuery{}), host.KindToolCall); tools == 0 {
		t.Fatal("tool calls become tool_call messages")
	}
}}

func rank(p host.TurnPhase) int {
	for i, q := range []host.TurnPhase{host.PhaseQueued, host.PhaseDispatched, host.PhaseProviderObserved,
		host.PhaseResolvingIdentity, host.PhaseDurablyAccepted, host.PhaseSettled} {
		if p == q {
			return i
		}
	}
	return -1
}

func countKind(ms []host.Message, k host.MessageKind) int {
	n := 0
	for _, m := range ms {
		if m.Kind == k {
			n++
		}
	}
	return n
}

var AcceptPersistenceFailure = Scenario{"barrier/accept_persistence_failure_is_delivery_unknown", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	f.store.onTurnWrite(func(t host.Turn) error {
		// The acceptance: the first write with the provider identity,
		// durably_accepted, or settled when the answer ended while the
		// acceptance read the Turn (Acceptance.More).
		if t.ProviderTurnID != "" {
			return errf("disk full: %w", host.ErrUnavailable)
		}
		return nil
	})
	_, err := f.send(s.ID, "b-2", "/sim words=5")
	wantCode(t, err, host.CodeOutcomeUnknown)
	f.store.onTurnWrite(nil)

	turns, _ := f.host.ListSessionTurns(ctx, ws, s.ID, host.TurnQuery{})
	if len(turns.Turns) != 1 {
		t.Fatalf("turns %d", len(turns.Turns))
	}
	tr := f.waitSettled(turns.Turns[0])
	if tr.Outcome != host.OutcomeFailed || tr.FailureReason != host.ReasonExecutionStatusUnknown {
		t.Fatalf("unknown delivery settles failed/execution_status_unknown: %+v", tr)
	}
	if agentText(f.messages(s.ID, host.MessageQuery{})) != "" {
		t.Fatal("no output may become canonical for an unaccepted turn")
	}
	// The claim is kept: a retry returns the same turn and never redispatches.
	r, err := f.send(s.ID, "b-2", "/sim words=5")
	if err != nil || r.Turn.ID != tr.ID {
		t.Fatalf("retry: %+v %v", r, err)
	}
	if n := f.runtime.dispatches.Load(); n != 1 {
		t.Fatalf("dispatches = %d, want 1", n)
	}
}}

var ProviderStateLost = Scenario{"barrier/provider_state_lost_is_execution_status_unknown", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	r, err := f.send(s.ID, "b-3", "/sim crash")
	var tr host.Turn
	if err != nil {
		// The agent died before accepting: the delivery outcome is unknown.
		wantCode(t, err, host.CodeOutcomeUnknown)
		turns, _ := f.host.ListSessionTurns(ctx, ws, s.ID, host.TurnQuery{})
		tr = turns.Turns[0]
	} else {
		tr = *r.Turn
	}
	tr = f.waitSettled(tr)
	if tr.Outcome != host.OutcomeFailed || tr.FailureReason != host.ReasonExecutionStatusUnknown {
		t.Fatalf("a lost provider never yields a guessed outcome: %+v", tr)
	}
	// The session keeps working with a new agent connection, once a
	// member chose to go on without the lost agent context.
	next := f.waitSettled(f.sendAfterContextLoss(s.ID, "b-4", "still there?"))
	if next.Outcome != host.OutcomeCompleted {
		t.Fatalf("next turn: %+v", next)
	}
}}

// AnswerAtTheBarrier: an answer the agent finished before the barrier
// (held output and the terminal) commits with the acceptance, in one
// transaction, also when that commit's acknowledgement is lost.
var AnswerAtTheBarrier = Scenario{"barrier/answer_at_the_barrier_commits_with_acceptance", func(t *testing.T, d Driver) {
	for _, ambiguous := range []bool{false, true} {
		t.Run(fmt.Sprintf("ambiguous=%v", ambiguous), func(t *testing.T) {
			f := newFixture(t, d)
			evs := []host.OutputEvent{
				{Seq: 1, Key: "text-1", Kind: host.KindText, Text: "all of "},
				{Seq: 2, Key: "text-1", Kind: host.KindText, Text: "it", Done: true},
				{Seq: 3, Key: "text-2", Kind: host.KindText, Text: "left open"},
			}
			rt := &scriptRuntime{events: evs, held: len(evs)}
			f.useScript(rt)
			if ambiguous {
				f.store.loseFirstSinkAck()
			}
			s := f.createEmpty()
			tr := f.waitSettled(f.mustSend(s.ID, "barrier-1", "go"))
			if tr.Outcome != host.OutcomeCompleted || tr.ProviderTurnID == "" {
				t.Fatalf("turn: %+v", tr)
			}
			if txs := f.store.outputTxs(); len(txs) != 1 || !txs[0].settles {
				t.Fatalf("acceptance, output and settlement took %d output transactions, want 1 that settles: %+v", len(txs), txs)
			}
			msgs := f.messages(s.ID, host.MessageQuery{TurnID: tr.ID})
			checkTranscript(t, msgs, tr.ID, evs, false)
			f.expectNoStreaming(s.ID)
			c, err := f.store.GetClaim(ctx, ws, "barrier-1")
			if err != nil || c.State != host.ClaimAccepted {
				t.Fatalf("claim %+v, %v", c, err)
			}
			// The Turn let go of the session: the next prompt runs.
			if next := f.waitSettled(f.mustSend(s.ID, "barrier-2", "again")); next.Outcome != host.OutcomeCompleted {
				t.Fatalf("next turn: %+v", next)
			}
		})
	}
}}

// AnswerDuringTheAcceptanceRead: what the agent sends while the acceptance
// reads the Turn (Acceptance.More) commits with it: the rest of an answer
// and its end make one transaction with the acceptance, also when that
// commit's acknowledgement is lost (the retried transaction calls More
// again and gets nothing new); words without the end are numbered on, and
// the stream goes on after them.
var AnswerDuringTheAcceptanceRead = Scenario{"barrier/answer_during_the_acceptance_read_commits_with_it", func(t *testing.T, d Driver) {
	evs := []host.OutputEvent{
		{Seq: 1, Key: "text-1", Kind: host.KindText, Text: "held", Done: true},
		{Seq: 2, Key: "text-2", Kind: host.KindText, Text: "during the 𝄞 read", Done: true},
		{Seq: 3, Key: "text-3", Kind: host.KindText, Text: "left open"},
	}
	for _, tc := range []struct {
		name      string
		more      int
		ambiguous bool
		txs       int // output transactions committed, the acceptance first
	}{
		{"the end", 2, false, 1},
		{"the end, ambiguous", 2, true, 1},
		{"words only", 1, false, 3},
		{"words only, ambiguous", 1, true, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, d)
			rt := &scriptRuntime{events: evs, held: 1, more: tc.more}
			f.useScript(rt)
			if tc.ambiguous {
				f.store.loseFirstSinkAck()
			}
			s := f.createEmpty()
			tr := f.waitSettled(f.mustSend(s.ID, "during-1", "go"))
			if tr.Outcome != host.OutcomeCompleted || tr.ProviderTurnID == "" {
				t.Fatalf("turn: %+v", tr)
			}
			// The Turn is settled in the store before the store wrapper
			// records the commit: wait for the runtime's Terminal to return.
			rt.wg.Wait()
			txs := f.store.outputTxs()
			// One message per event: the acceptance wrote the held one and
			// what More gave (and may close an open one as it settles).
			if len(txs) != tc.txs || txs[0].messages < 1+tc.more || !txs[len(txs)-1].settles || (tc.txs > 1 && txs[0].settles) {
				t.Fatalf("output transactions %+v, want %d, the first with %d messages or more, the last settling", txs, tc.txs, 1+tc.more)
			}
			checkTranscript(t, f.messages(s.ID, host.MessageQuery{TurnID: tr.ID}), tr.ID, evs, false)
			f.expectNoStreaming(s.ID)
			if next := f.waitSettled(f.mustSend(s.ID, "during-2", "again")); next.Outcome != host.OutcomeCompleted {
				t.Fatalf("next turn: %+v", next)
			}
		})
	}
}}
