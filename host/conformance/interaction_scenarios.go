package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// ---- helpers ----

// waitInteraction polls the root's interaction tree until one interaction
// satisfies ok.
func (f *fixture) waitInteraction(rootID, what string, ok func(host.Interaction) bool) (host.InteractionTree, host.Interaction) {
	f.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		tree, err := f.host.GetSessionInteractionTreeSnapshot(ctx, ws, rootID)
		if err == nil {
			for _, i := range tree.Interactions {
				if ok(i) {
					return tree, i
				}
			}
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("no interaction %s in tree %s (last %+v, err %v)", what, rootID, tree, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func pending(i host.Interaction) bool { return i.State == host.InteractionPending }

func (f *fixture) pendingPermission(rootID string) (host.InteractionTree, host.Interaction) {
	f.t.Helper()
	return f.waitInteraction(rootID, "pending", pending)
}

func (f *fixture) respond(i host.Interaction, option, user string, payload string) (host.RespondResult, error) {
	in := host.RespondInput{Ref: i.Ref(), Response: host.InteractionResponse{OptionID: option},
		RespondedBy: user, RespondedByName: strings.ToUpper(user[:1]) + user[1:]}
	if payload != "" {
		in.Response.Payload = json.RawMessage(payload)
	}
	return f.host.RespondInteraction(ctx, in)
}

func (f *fixture) interaction(ref host.InteractionRef) host.Interaction {
	f.t.Helper()
	i, err := f.host.GetInteraction(ctx, ref)
	if err != nil {
		f.t.Fatalf("get interaction: %v", err)
	}
	return i
}

// waitResolved polls until the interaction's runtime result is recorded.
func (f *fixture) waitResolved(ref host.InteractionRef) host.Interaction {
	f.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		i := f.interaction(ref)
		if i.Resolution != "" {
			return i
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("interaction %s never resolved: %+v", ref.RequestID, i)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (f *fixture) operation(ws, id string) host.RuntimeOperation {
	f.t.Helper()
	op, err := f.store.GetRuntimeOperation(ctx, ws, id)
	if err != nil {
		f.t.Fatalf("get runtime operation: %v", err)
	}
	return op
}

// holdDeliveries makes deliveries wait until the returned release is
// called; held receives each held delivery.
func (f *fixture) holdDeliveries() (held chan host.InteractionDelivery, release func()) {
	hold := make(chan struct{})
	held = make(chan host.InteractionDelivery, 8)
	f.runtime.set(func(r *probeRuntime) { r.holdDelivery, r.deliveryHeld = hold, held })
	var once sync.Once
	release = func() { once.Do(func() { close(hold) }) }
	f.t.Cleanup(release)
	return held, release
}

func waitHeld(t *testing.T, held chan host.InteractionDelivery) host.InteractionDelivery {
	t.Helper()
	select {
	case d := <-held:
		return d
	case <-time.After(15 * time.Second):
		t.Fatal("the delivery was never attempted")
		return host.InteractionDelivery{}
	}
}

// turnsWithSubmitID lists the session's turns submitted under id.
func (f *fixture) turnsWithSubmitID(sessionID, id string) []host.Turn {
	f.t.Helper()
	p, err := f.host.ListSessionTurns(ctx, ws, sessionID, host.TurnQuery{Limit: 200})
	if err != nil {
		f.t.Fatalf("list turns: %v", err)
	}
	var out []host.Turn
	for _, t := range p.Turns {
		if t.ClientSubmitID == id {
			out = append(out, t)
		}
	}
	return out
}

func (f *fixture) waitFollowUp(sessionID, id string) host.Turn {
	f.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if ts := f.turnsWithSubmitID(sessionID, id); len(ts) > 0 {
			return ts[0]
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("no follow-up turn %s", id)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ---- scenarios ----

// earlyAsk tries to report an interaction before acceptance.
type earlyAsk struct {
	host.TurnSink
	mu    sync.Mutex
	early error
}

func (p *earlyAsk) Observed(ctx context.Context, phase host.TurnPhase) error {
	err := p.TurnSink.Observed(ctx, phase)
	if phase == host.PhaseResolvingIdentity {
		e := p.TurnSink.Interaction(ctx, host.InteractionRequest{RequestID: "leak", Kind: host.InteractionApproval,
			Title: "leaked", Options: []host.InteractionOption{{ID: "ok", Name: "OK"}}})
		p.mu.Lock()
		p.early = e
		p.mu.Unlock()
	}
	return err
}

var InteractionsAfterAcceptance = Scenario{"interactions/canonical_only_after_acceptance", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	probe := &earlyAsk{}
	f.runtime.set(func(r *probeRuntime) {
		r.wrapSink = func(k host.TurnSink) host.TurnSink { probe.TurnSink = k; return probe }
	})
	tr := f.mustSend(s.ID, "i-1", "/sim permission")
	tree, it := f.pendingPermission(s.ID)
	probe.mu.Lock()
	early := probe.early
	probe.mu.Unlock()
	if early == nil {
		t.Fatal("an interaction reported before acceptance was accepted by the Host")
	}
	if tree.RootTurnID != tr.ID || len(tree.Interactions) != 1 {
		t.Fatalf("tree: %+v", tree)
	}
	if it.WorkspaceID != ws || it.SessionID != s.ID || it.TurnID != tr.ID || it.RequestID == "" || it.RootSessionID != s.ID ||
		it.Kind != host.InteractionApproval || len(it.Options) != 2 || it.Tool == nil || it.Tool.Kind != "edit" {
		t.Fatalf("interaction: %+v", it)
	}
	got := f.waitTurn(tr, "accepted", host.Turn.Accepted)
	if got.Phase != host.PhaseDurablyAccepted {
		t.Fatalf("the turn waits for the answer: %+v", got)
	}
	if _, err := f.host.GetInteraction(ctx, host.InteractionRef{WorkspaceID: ws, SessionID: s.ID, TurnID: tr.ID, RequestID: "leak"}); host.CodeOf(err) != host.CodeNotFound {
		t.Fatalf("the early interaction must not be canonical: %v", err)
	}
}}

var InteractionOneWinner = Scenario{"interactions/one_winner_identical_answered_different_superseded", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	tr := f.mustSend(s.ID, "i-2", "/sim permission")
	_, it := f.pendingPermission(s.ID)

	const n = 12
	type answer struct {
		user, option string
		res          host.RespondResult
		err          error
	}
	answers := make([]answer, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		answers[i].user = fmt.Sprintf("user%02d", i)
		answers[i].option = "allow"
		if i%2 == 1 {
			answers[i].option = "reject"
		}
		wg.Go(func() {
			<-start
			answers[i].res, answers[i].err = f.respond(it, answers[i].option, answers[i].user, "")
		})
	}
	close(start)
	wg.Wait()
	won := f.interaction(it.Ref())
	if won.State != host.InteractionAnswered && won.State != host.InteractionSuperseded || won.Response == nil {
		t.Fatalf("after the race: %+v", won)
	}
	winner := won.Response.OptionID
	for _, a := range answers {
		if a.err != nil {
			t.Fatalf("%s got an error for losing a race: %v", a.user, a.err)
		}
		want := host.DispositionSuperseded
		if a.option == winner {
			want = host.DispositionAnswered
		}
		if a.res.Disposition != want {
			t.Fatalf("%s answered %s: disposition %s, want %s (winner %s)", a.user, a.option, a.res.Disposition, want, winner)
		}
		if a.user == won.AnsweredBy && a.option != winner {
			t.Fatalf("the recorded responder %s did not give the winning answer", a.user)
		}
	}
	if won.AnsweredBy == "" || won.AnsweredAt == nil || won.OperationID != host.OperationIDFor(it.Ref()) {
		t.Fatalf("the answer records who gave it: %+v", won)
	}
	done := f.waitSettled(tr)
	if done.Outcome != host.OutcomeCompleted {
		t.Fatalf("turn: %+v", done)
	}
	if got := f.waitResolved(it.Ref()); got.State != host.InteractionAnswered || got.Resolution != host.ResolutionDelivered {
		t.Fatalf("resolved: %+v", got)
	}
	if n := f.runtime.deliveries.Load(); n != 1 {
		t.Fatalf("deliveries = %d, want exactly 1", n)
	}
	text := agentText(f.messages(s.ID, host.MessageQuery{}))
	if strings.Count(text, "Permission outcome:") != 1 || !strings.Contains(text, "("+winner+")") {
		t.Fatalf("the agent must receive the winning answer once: %q", text)
	}
}}

var InteractionLostDeliveryRetried = Scenario{"interactions/lost_delivery_retried_never_duplicated", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	f.runtime.set(func(r *probeRuntime) { r.loseAcks = 1 })
	tr := f.mustSend(s.ID, "i-3", "/sim permission")
	_, it := f.pendingPermission(s.ID)
	if r, err := f.respond(it, "allow", "alice", ""); err != nil || r.Disposition != host.DispositionAnswered {
		t.Fatalf("respond: %+v %v", r, err)
	}
	f.waitSettled(tr)
	got := f.waitResolved(it.Ref())
	if got.State != host.InteractionAnswered || got.Resolution != host.ResolutionDelivered {
		t.Fatalf("resolved: %+v", got)
	}
	op := f.operation(ws, got.OperationID)
	if op.State != host.OperationCompleted || op.Result != host.DeliveryDelivered || op.Attempts != 2 {
		t.Fatalf("operation: %+v", op)
	}
	if n := f.runtime.deliveries.Load(); n != 2 {
		t.Fatalf("delivery attempts = %d, want 2 (one lost acknowledgement)", n)
	}
	if text := agentText(f.messages(s.ID, host.MessageQuery{})); strings.Count(text, "Permission outcome:") != 1 {
		t.Fatalf("a retried delivery reached the agent twice: %q", text)
	}
}}

var InteractionSupersededWins = Scenario{"interactions/runtime_superseded_result_wins_over_answered_marker", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	held, release := f.holdDeliveries()
	tr := f.mustSend(s.ID, "i-4", "/sim permission")
	_, it := f.pendingPermission(s.ID)
	if r, err := f.respond(it, "allow", "alice", ""); err != nil || r.Disposition != host.DispositionAnswered {
		t.Fatalf("respond: %+v %v", r, err)
	}
	waitHeld(t, held)
	// The turn is cancelled while the answer is on its way: the runtime
	// answers the provider request "cancelled", so the answer finds it gone.
	res, err := f.host.CancelTurn(ctx, host.CancelInput{WorkspaceID: ws, SessionID: s.ID, TurnID: tr.ID, Wait: 10 * time.Second})
	if err != nil || res.Turn.Outcome != host.OutcomeCanceled {
		t.Fatalf("cancel: %+v %v", res, err)
	}
	if i := f.interaction(it.Ref()); i.State != host.InteractionAnswered {
		t.Fatalf("an answered interaction waits for the runtime's result: %+v", i)
	}
	release()
	got := f.waitResolved(it.Ref())
	if got.State != host.InteractionSuperseded || got.Resolution != host.ResolutionProviderGone || got.AnsweredBy != "alice" {
		t.Fatalf("the runtime's superseded result must win: %+v", got)
	}
	if r, err := f.respond(it, "allow", "bob", ""); err != nil || r.Disposition != host.DispositionSuperseded {
		t.Fatalf("a later identical answer follows the runtime's result: %+v %v", r, err)
	}
	if op := f.operation(ws, got.OperationID); op.State != host.OperationCompleted || op.Result != host.DeliverySuperseded {
		t.Fatalf("operation: %+v", op)
	}
}}

var InteractionCancelAnswersPending = Scenario{"interactions/cancel_answers_pending_cancelled", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	tr := f.mustSend(s.ID, "i-5", "/sim permission")
	_, it := f.pendingPermission(s.ID)
	res, err := f.host.CancelTurn(ctx, host.CancelInput{WorkspaceID: ws, SessionID: s.ID, TurnID: tr.ID, Wait: 10 * time.Second})
	if err != nil || !res.Settled || res.Turn.Outcome != host.OutcomeCanceled {
		t.Fatalf("cancel: %+v %v", res, err)
	}
	got := f.interaction(it.Ref())
	if got.State != host.InteractionCanceled || got.Resolution != host.ResolutionTurnCanceled {
		t.Fatalf("cancelled turn's interaction: %+v", got)
	}
	if r, err := f.respond(it, "allow", "alice", ""); err != nil || r.Disposition != host.DispositionSuperseded {
		t.Fatalf("answer after cancel: %+v %v", r, err)
	}
	if n := f.runtime.deliveries.Load(); n != 0 {
		t.Fatalf("nothing is delivered for a cancelled request: %d", n)
	}
	if next := f.waitSettled(f.mustSend(s.ID, "i-5b", "/sim words=2")); next.Outcome != host.OutcomeCompleted {
		t.Fatalf("the session goes on: %+v", next)
	}
}}

var InteractionDenialFollowUp = Scenario{"interactions/denial_follow_up_submitted_once_across_restarts", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	tr := f.mustSend(s.ID, "i-6", "/sim permission")
	_, it := f.pendingPermission(s.ID)
	if r, err := f.respond(it, "reject", "alice", `{"message":"keep config.json as it is"}`); err != nil || r.Disposition != host.DispositionAnswered {
		t.Fatalf("respond: %+v %v", r, err)
	}
	if done := f.waitSettled(tr); done.Outcome != host.OutcomeCompleted {
		t.Fatalf("answered turn: %+v", done)
	}
	id := host.DenyFollowUpPrefix + host.OperationIDFor(it.Ref())
	fu := f.waitSettled(f.waitFollowUp(s.ID, id))
	if fu.Outcome != host.OutcomeCompleted || fu.SubmittedBy != "alice" {
		t.Fatalf("follow-up turn: %+v", fu)
	}
	ms := f.messages(s.ID, host.MessageQuery{TurnID: fu.ID})
	if len(ms) == 0 || ms[0].Role != host.RoleUser || !strings.Contains(ms[0].Content.Text, "keep config.json as it is") {
		t.Fatalf("follow-up prompt: %+v", ms)
	}
	op := f.operation(ws, host.OperationIDFor(it.Ref()))
	if op.State != host.OperationCompleted || op.FollowUpTurnID != fu.ID || op.Result != host.DeliveryDelivered {
		t.Fatalf("operation: %+v", op)
	}
	f.crash()
	f.crash()
	if ts := f.turnsWithSubmitID(s.ID, id); len(ts) != 1 {
		t.Fatalf("follow-up turns after restarts: %d", len(ts))
	}
	// The id lives in the Host's reserved space: a client cannot use it.
	_, err := f.send(s.ID, id, ms[0].Content.Text)
	wantCode(t, err, host.CodeInvalidInput)
}}

var RecoverOperationsFirst = Scenario{"recovery/runtime_operations_recover_before_stale_turns", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	held, _ := f.holdDeliveries()
	tr := f.mustSend(s.ID, "i-7", "/sim permission")
	_, it := f.pendingPermission(s.ID)
	if r, err := f.respond(it, "allow", "alice", ""); err != nil || r.Disposition != host.DispositionAnswered {
		t.Fatalf("respond: %+v %v", r, err)
	}
	waitHeld(t, held) // leased, mid-delivery: the process dies here

	rep := f.crash()
	if rep.RequeuedOperations != 1 || rep.RecoveredOperations != 1 {
		t.Fatalf("report: %+v", rep)
	}
	order := f.store.callOrder()
	if len(order) < 2 || order[0] != "RequeueRuntimeOperations" || order[1] != "UnsettledTurns" {
		t.Fatalf("recovery order: %v", order)
	}
	got := f.interaction(it.Ref())
	// The new process's runtime decided: the provider request died with
	// the old agent. Turn settlement did not guess for it.
	if got.State != host.InteractionSuperseded || got.Resolution != host.ResolutionProviderGone {
		t.Fatalf("interaction after recovery: %+v", got)
	}
	if n := f.runtime.deliveries.Load(); n != 1 {
		t.Fatalf("deliveries after restart = %d, want 1", n)
	}
	if op := f.operation(ws, got.OperationID); op.State != host.OperationCompleted || op.Result != host.DeliverySuperseded {
		t.Fatalf("operation: %+v", op)
	}
	if tt, _ := f.host.GetTurn(ctx, ws, s.ID, tr.ID); tt.FailureReason != host.ReasonExecutionStatusUnknown {
		t.Fatalf("turn: %+v", tt)
	}
	// Nothing more to do on the next start.
	if rep := f.crash(); rep.RequeuedOperations != 0 || rep.RecoveredOperations != 0 {
		t.Fatalf("second recovery: %+v", rep)
	}
}}

var RecoverDenialBeforeDelivery = Scenario{"recovery/denial_committed_before_delivery_follows_up_once", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	held, _ := f.holdDeliveries()
	f.mustSend(s.ID, "i-8", "/sim permission")
	_, it := f.pendingPermission(s.ID)
	if r, err := f.respond(it, "reject", "bob", `{"message":"not today"}`); err != nil || r.Disposition != host.DispositionAnswered {
		t.Fatalf("respond: %+v %v", r, err)
	}
	waitHeld(t, held)
	f.crash()
	id := host.DenyFollowUpPrefix + host.OperationIDFor(it.Ref())
	fu := f.waitFollowUp(s.ID, id)
	// The restarted agent lost the session: the follow-up waits for the
	// explicit choice.
	f.waitContextLost(s.ID)
	if _, err := f.host.ContinueFresh(ctx, host.ContinueFreshInput{WorkspaceID: ws, SessionID: s.ID}); err != nil {
		t.Fatal(err)
	}
	fu = f.waitSettled(fu)
	ms := f.messages(s.ID, host.MessageQuery{TurnID: fu.ID})
	if len(ms) == 0 || !strings.Contains(ms[0].Content.Text, "Bob declined") || !strings.Contains(ms[0].Content.Text, "not today") {
		t.Fatalf("follow-up prompt: %+v", ms)
	}
	f.crash()
	if ts := f.turnsWithSubmitID(s.ID, id); len(ts) != 1 {
		t.Fatalf("follow-up turns after another restart: %d", len(ts))
	}
}}

var InteractionTreeSnapshot = Scenario{"interactions/tree_snapshot_root_and_subagents", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	tr := f.mustSend(s.ID, "i-9", "/sim subagent")
	tree, it := f.pendingPermission(s.ID)
	if tree.RootSessionID != s.ID || tree.RootTurnID != tr.ID || it.SessionID == s.ID || it.RootSessionID != s.ID {
		t.Fatalf("tree: %+v interaction %+v", tree, it)
	}
	child, err := f.host.GetSession(ctx, ws, it.SessionID)
	if err != nil || child.ParentID != s.ID || child.RootID != s.ID {
		t.Fatalf("child session: %+v %v", child, err)
	}
	if _, err := f.host.GetSessionInteractionTreeSnapshot(ctx, ws, child.ID); host.CodeOf(err) != host.CodeInvalidInput {
		t.Fatalf("a child is not a tree root: %v", err)
	}
	if _, err := f.send(child.ID, "i-9c", "hello child"); host.CodeOf(err) != host.CodeUnsupported {
		t.Fatalf("a sub-agent session is driven by its parent: %v", err)
	}
	if r, err := f.respond(it, "allow", "alice", ""); err != nil || r.Disposition != host.DispositionAnswered {
		t.Fatalf("respond: %+v %v", r, err)
	}
	if done := f.waitSettled(tr); done.Outcome != host.OutcomeCompleted {
		t.Fatalf("root turn: %+v", done)
	}
	ct := f.waitSettled(host.Turn{WorkspaceID: ws, SessionID: child.ID, ID: it.TurnID})
	if ct.Outcome != host.OutcomeCompleted || ct.Origin != "subagent" {
		t.Fatalf("child turn: %+v", ct)
	}
	if text := agentText(f.messages(child.ID, host.MessageQuery{})); !strings.Contains(text, "Sub-agent here") || !strings.Contains(text, "(allow)") {
		t.Fatalf("child transcript: %q", text)
	}
	// A new root turn: the tree names it, and the sub-agent's latest-turn
	// interactions stay in the tree (decided, not actionable).
	next := f.waitSettled(f.mustSend(s.ID, "i-9b", "/sim words=2"))
	tree, err = f.host.GetSessionInteractionTreeSnapshot(ctx, ws, s.ID)
	if err != nil || tree.RootTurnID != next.ID || len(tree.Interactions) != 1 || len(tree.Pending()) != 0 ||
		tree.Interactions[0].SessionID != child.ID {
		t.Fatalf("tree after a new root turn: %+v %v", tree, err)
	}
}}

var InteractionOlderTurnNotActionable = Scenario{"interactions/older_turn_pending_row_never_actionable", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	first := f.waitSettled(f.mustSend(s.ID, "i-10", "/sim words=2"))
	second := f.waitSettled(f.mustSend(s.ID, "i-10b", "/sim words=2"))
	// A pending row on an older turn, as a store might hold after a
	// partial failure.
	stale := host.Interaction{WorkspaceID: ws, SessionID: s.ID, TurnID: first.ID, RequestID: "old-1", RootSessionID: s.ID,
		Kind: host.InteractionApproval, Title: "old", Options: []host.InteractionOption{{ID: "ok", Name: "OK"}},
		State: host.InteractionPending, CreatedAt: time.Now().UTC(), UpdatedAt: time.Now().UTC()}
	err := f.store.Update(ctx, func(tx host.Tx) error {
		return tx.InsertInteraction(ctx, stale)
	})
	if err != nil {
		t.Fatal(err)
	}
	tree, err := f.host.GetSessionInteractionTreeSnapshot(ctx, ws, s.ID)
	if err != nil || tree.RootTurnID != second.ID || len(tree.Interactions) != 0 {
		t.Fatalf("an older turn's row is not in the tree: %+v %v", tree, err)
	}
	r, err := f.respond(stale, "ok", "alice", "")
	if err != nil || r.Disposition != host.DispositionSuperseded {
		t.Fatalf("answering an older turn's row: %+v %v", r, err)
	}
	if _, err := f.store.GetRuntimeOperation(ctx, ws, host.OperationIDFor(stale.Ref())); host.CodeOf(err) != host.CodeNotFound {
		t.Fatalf("no operation may be prepared for it: %v", err)
	}
}}

// InteractionTreeFactsFollowTheTree: the tree shows the latest Turns'
// interactions, so admitting a Turn dirties it and settling one that ended
// no interaction does not (hubs would reread it for nothing).
var InteractionTreeFactsFollowTheTree = Scenario{"interactions/tree_facts_only_when_the_tree_changes", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	tr := f.waitSettled(f.mustSend(s.ID, "t-1", "/sim words=3"))
	if tree := f.treeFacts(tr.ID, host.PhaseQueued); len(tree) != 1 || tree[0].TurnID != tr.ID {
		t.Fatalf("admission tree facts %+v, want one naming %s", tree, tr.ID)
	}
	if tree := f.treeFacts(tr.ID, host.PhaseSettled); len(tree) != 0 {
		t.Fatalf("a settlement that ended no interaction published tree facts %+v", tree)
	}
}}

// treeFacts returns the tree facts of the commit that published Turn turnID
// in phase.
func (f *fixture) treeFacts(turnID string, phase host.TurnPhase) []host.Fact {
	f.t.Helper()
	f.host.FlushPublish()
	for _, b := range f.obs.batchesSince(0) {
		var tree []host.Fact
		found := false
		for _, fa := range b {
			found = found || fa.Turn != nil && fa.Turn.ID == turnID && fa.Turn.Phase == phase
			if fa.Kind == host.FactInteractionTreeDirty {
				tree = append(tree, fa)
			}
		}
		if found {
			return tree
		}
	}
	f.t.Fatalf("no commit published Turn %s %s", turnID, phase)
	return nil
}

var InteractionOneTreeFact = Scenario{"interactions/one_tree_fact_per_commit_names_root", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	held, _ := f.holdDeliveries()
	tr := f.mustSend(s.ID, "i-11", "/sim subagent")
	_, it := f.pendingPermission(s.ID)
	if it.SessionID == s.ID {
		t.Fatal("expected the sub-agent's interaction")
	}
	f.host.FlushPublish() // publication is asynchronous
	before := f.obs.batchCount()
	if _, err := f.respond(it, "allow", "alice", ""); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, held)
	f.host.FlushPublish()
	// Streamed output of the root turn may commit meanwhile; only commits
	// that touched the tree count, and the answer must be exactly one.
	var treeBatches [][]host.Fact
	for _, b := range f.obs.batchesSince(before) {
		for _, fa := range b {
			if fa.Kind == host.FactInteractionTreeDirty {
				treeBatches = append(treeBatches, b)
				break
			}
		}
	}
	if len(treeBatches) != 1 {
		t.Fatalf("the answer commit published %d batches with tree facts: %+v", len(treeBatches), treeBatches)
	}
	var tree []host.Fact
	for _, fa := range treeBatches[0] {
		if fa.Kind == host.FactInteractionTreeDirty {
			tree = append(tree, fa)
		}
	}
	if len(tree) != 1 || tree[0].SessionID != s.ID || tree[0].TurnID != tr.ID {
		t.Fatalf("tree facts of the answer commit: %+v", tree)
	}
}}
