package conformance

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// goalScenarios is the goal saga (issue 13): the loop, control, fences,
// provider adoption and recovery, on every store.
func goalScenarios() []Scenario {
	return []Scenario{
		GoalArmContinueAchieved,
		GoalTextConvention,
		GoalPauseMidTurnResumeClear,
		GoalBudgetExhausted,
		GoalTimeBudgetStopsRunningTurn,
		GoalIdempotentAndConflict,
		GoalReplaceFencesLateResult,
		GoalProviderAdoption,
		GoalAdoptionLosesToNewerUserMutation,
		GoalCrashDuringTurnStaysUnknown,
		GoalCrashWithPendingFence,
		GoalCrashBeforeDispatch,
		GoalCrashBeforeArm,
		GoalCorruptRecordQuarantined,
		GoalInitialSessionGoal,
	}
}

func (f *fixture) goal(sid, csid, action string, spec *host.GoalSpec, by string) (host.GoalControlResult, error) {
	return f.host.GoalControl(ctx, host.GoalControlInput{WorkspaceID: ws, SessionID: sid,
		ClientSubmitID: csid, Action: action, Goal: spec, By: by, ByName: by + " (name)"})
}

func (f *fixture) mustGoal(sid, csid, action string, spec *host.GoalSpec, by string) host.GoalControlResult {
	f.t.Helper()
	r, err := f.goal(sid, csid, action, spec, by)
	if err != nil {
		f.t.Fatalf("goal %s: %v", action, err)
	}
	if !r.IntentAccepted {
		f.t.Fatalf("goal %s: intent not accepted", action)
	}
	return r
}

func (f *fixture) waitGoal(sid, what string, ok func(host.GoalState) bool) host.GoalState {
	f.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		g, err := f.host.GetGoal(ctx, ws, sid)
		if err == nil && ok(g) {
			return g
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("goal never became %s (last %+v / %+v, err %v)", what, g, g.Goal, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func goalStatus(s host.GoalStatus) func(host.GoalState) bool {
	return func(g host.GoalState) bool { return g.Goal != nil && g.Goal.Status == s }
}

// turnsOldestFirst lists every turn of the session, oldest first.
func (f *fixture) turnsOldestFirst(sid string) []host.Turn {
	f.t.Helper()
	p, err := f.host.ListSessionTurns(ctx, ws, sid, host.TurnQuery{Limit: 100})
	if err != nil {
		f.t.Fatalf("list turns: %v", err)
	}
	out := make([]host.Turn, 0, len(p.Turns))
	for i := len(p.Turns) - 1; i >= 0; i-- {
		out = append(out, p.Turns[i])
	}
	return out
}

// waitGoalTurnRunning waits until the goal's turn is durably accepted.
func (f *fixture) waitGoalTurnRunning(sid string) host.Turn {
	f.t.Helper()
	g := f.waitGoal(sid, "running a turn", func(g host.GoalState) bool { return g.Goal != nil && g.Goal.ActiveTurnID != "" })
	return f.waitTurn(host.Turn{WorkspaceID: ws, SessionID: sid, ID: g.Goal.ActiveTurnID}, "accepted", host.Turn.Accepted)
}

func (f *fixture) goalFacts(sid string) []host.GoalState {
	f.obs.mu.Lock()
	defer f.obs.mu.Unlock()
	var out []host.GoalState
	for _, fact := range f.obs.facts {
		if fact.Kind == host.FactGoalState && fact.SessionID == sid && fact.Goal != nil {
			out = append(out, *fact.Goal)
		}
	}
	return out
}

// waitGoalFact waits until a committed goal_state fact of (w, sid)
// satisfies ok and returns it.
func (f *fixture) waitGoalFact(w, sid, what string, ok func(host.GoalState) bool) host.GoalState {
	f.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		f.obs.mu.Lock()
		for _, fact := range f.obs.facts {
			if fact.Kind == host.FactGoalState && fact.WorkspaceID == w && fact.SessionID == sid && fact.Goal != nil && ok(*fact.Goal) {
				g := *fact.Goal
				f.obs.mu.Unlock()
				return g
			}
		}
		f.obs.mu.Unlock()
		if time.Now().After(deadline) {
			f.t.Fatalf("no goal_state fact %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// GoalArmContinueAchieved: set → goal_arm → goal_continuation → the agent
// reports achieved through the _ensemble/goal notification. Each goal turn
// carries the goal's exact operation and revision; every projection change
// committed a goal_state fact carrying it, in order.
var GoalArmContinueAchieved = Scenario{Name: "goals/set_arm_continue_achieved", Run: func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	r := f.mustGoal(s.ID, "g1", host.GoalActionSet, &host.GoalSpec{Objective: "/sim instant goal-after=2\nShip the feature",
		Criteria: "tests pass", MaxTurns: 5}, "alice")
	if r.Goal == nil || r.Goal.Status != host.GoalActive || r.Goal.Revision != 1 || r.Operation.Action != "set" {
		t.Fatalf("set result = %+v / %+v", r, r.Goal)
	}
	g := f.waitGoal(s.ID, "achieved", goalStatus(host.GoalAchieved))
	if g.Goal.TurnsUsed != 2 || g.Goal.EndReason != "agent_reported" || g.Observed == nil || g.Observed.Status != "achieved" {
		t.Fatalf("achieved goal = %+v / %+v / %+v", g, g.Goal, g.Observed)
	}
	turns := f.turnsOldestFirst(s.ID)
	if len(turns) != 2 {
		t.Fatalf("want 2 goal turns, got %d", len(turns))
	}
	for i, kind := range []string{host.OriginGoalArm, host.OriginGoalContinuation} {
		tu := turns[i]
		if tu.Origin != kind || tu.Goal == nil || tu.Goal.Kind != kind || tu.Goal.OperationID != r.Operation.ID ||
			tu.Goal.Revision != 1 || tu.Goal.Number != i+1 || tu.Outcome != host.OutcomeCompleted {
			t.Fatalf("turn %d = origin %q provenance %+v outcome %q", i, tu.Origin, tu.Goal, tu.Outcome)
		}
	}
	if g.Revision != 1 {
		t.Fatalf("the loop changed the revision: %d", g.Revision)
	}
	// Facts are published after their commit, on their own goroutine: the
	// store can show the goal achieved before its fact reaches observers.
	f.waitGoalFact(s.WorkspaceID, s.ID, "achieved", goalStatus(host.GoalAchieved))
	facts := f.goalFacts(s.ID)
	if len(facts) < 5 {
		t.Fatalf("want a goal_state fact per projection change, got %d", len(facts))
	}
	for i := 1; i < len(facts); i++ {
		if facts[i].Seq != facts[i-1].Seq+1 {
			t.Fatalf("goal_state facts out of order or missing: seq %d after %d", facts[i].Seq, facts[i-1].Seq)
		}
	}
	if last := facts[len(facts)-1]; last.Goal == nil || last.Goal.Status != host.GoalAchieved {
		t.Fatalf("last goal_state fact = %+v", last.Goal)
	}
	if n := f.runtime.dispatches.Load(); n != 2 {
		t.Fatalf("want 2 dispatches, got %d", n)
	}
}}

// GoalTextConvention: an agent without the extension ends its reply with
// "GOAL: ACHIEVED"; the Host reads the verdict from the transcript.
var GoalTextConvention = Scenario{Name: "goals/text_convention_fallback", Run: func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	f.mustGoal(s.ID, "g1", host.GoalActionSet, &host.GoalSpec{Objective: "/sim instant goal-text-after=1\nTidy up"}, "alice")
	g := f.waitGoal(s.ID, "achieved", goalStatus(host.GoalAchieved))
	if g.Goal.TurnsUsed != 1 || g.Observed != nil {
		t.Fatalf("goal = %+v observed %+v", g.Goal, g.Observed)
	}
}}

// GoalPauseMidTurnResumeClear: pausing fences the running goal turn (it is
// cancelled, no further turn starts); resume arms a new goal_arm turn for
// the new revision; clear cancels that one and leaves no goal.
var GoalPauseMidTurnResumeClear = Scenario{Name: "goals/pause_mid_turn_resume_clear", Run: func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	set := f.mustGoal(s.ID, "g1", host.GoalActionSet, &host.GoalSpec{Objective: "/sim hang\nKeep going"}, "alice")
	first := f.waitGoalTurnRunning(s.ID)
	p := f.mustGoal(s.ID, "g2", host.GoalActionPause, nil, "bob")
	if p.Goal == nil || p.Goal.Status != host.GoalPaused || p.Goal.PausedBy != "bob" || p.Goal.Revision != 2 {
		t.Fatalf("pause result = %+v", p.Goal)
	}
	if p.Operation.State != host.GoalOpApplied {
		t.Fatalf("pause operation = %q, want applied (fence processed)", p.Operation.State)
	}
	first = f.expectTurn(s.ID, first.ID, host.PhaseSettled, host.OutcomeCanceled, "")
	if first.CanceledBy != "ensemble:goal" || first.CanceledByName != "bob (name) (goal paused)" || first.Goal.OperationID != set.Operation.ID {
		t.Fatalf("fenced turn = %+v", first)
	}
	time.Sleep(700 * time.Millisecond) // more than a goal worker pass
	if n := len(f.turnsOldestFirst(s.ID)); n != 1 {
		t.Fatalf("a paused goal started another turn: %d turns", n)
	}
	f.expectBusy(s.ID, false)

	res := f.mustGoal(s.ID, "g3", host.GoalActionResume, nil, "carol")
	if res.Goal.Status != host.GoalActive || res.Goal.Revision != 3 || res.Goal.PausedBy != "" {
		t.Fatalf("resume result = %+v", res.Goal)
	}
	second := f.waitGoalTurnRunning(s.ID)
	if second.Goal == nil || second.Goal.Kind != host.OriginGoalArm || second.Goal.Revision != 3 || second.Goal.OperationID != res.Operation.ID {
		t.Fatalf("resumed turn provenance = %+v", second.Goal)
	}
	c := f.mustGoal(s.ID, "g4", host.GoalActionClear, nil, "alice")
	if c.Goal != nil || c.State.Revision != 4 {
		t.Fatalf("clear result = %+v rev %d", c.Goal, c.State.Revision)
	}
	f.expectTurn(s.ID, second.ID, host.PhaseSettled, host.OutcomeCanceled, "")
	time.Sleep(700 * time.Millisecond)
	if n := len(f.turnsOldestFirst(s.ID)); n != 2 {
		t.Fatalf("a cleared goal started another turn: %d turns", n)
	}
	// Pausing what is not live is typed and changes nothing.
	_, err := f.goal(s.ID, "g5", host.GoalActionPause, nil, "bob")
	wantCode(t, err, host.CodeInvalidInput)
	if g, _ := f.host.GetGoal(ctx, ws, s.ID); g.Revision != 4 || g.Goal != nil {
		t.Fatalf("refused pause changed the goal: %+v", g)
	}
}}

// GoalBudgetExhausted: the loop stops at maxTurns when the agent never
// reports the goal achieved.
var GoalBudgetExhausted = Scenario{Name: "goals/budget_exhausted", Run: func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	f.mustGoal(s.ID, "g1", host.GoalActionSet, &host.GoalSpec{Objective: "/sim instant goal-after=99\nEndless", MaxTurns: 3}, "alice")
	g := f.waitGoal(s.ID, "budget_exhausted", goalStatus(host.GoalBudgetExhausted))
	if g.Goal.TurnsUsed != 3 || g.Goal.EndReason != "max_turns" {
		t.Fatalf("goal = %+v", g.Goal)
	}
	time.Sleep(700 * time.Millisecond)
	if n := len(f.turnsOldestFirst(s.ID)); n != 3 {
		t.Fatalf("want exactly 3 goal turns, got %d", n)
	}
}}

// GoalTimeBudgetStopsRunningTurn: maxDuration also bounds a goal turn
// that is still running. The goal worker's pass cancels it through the
// normal cancel path with the stop reason goal_budget_exhausted, and the
// goal ends budget_exhausted (max_duration); nothing further starts.
var GoalTimeBudgetStopsRunningTurn = Scenario{Name: "goals/time_budget_stops_running_turn", Run: func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	f.mustGoal(s.ID, "g1", host.GoalActionSet, &host.GoalSpec{Objective: "/sim hang\nNever ends", MaxTurns: 5, MaxDuration: "1s"}, "alice")
	turn := f.waitGoalTurnRunning(s.ID)
	g := f.waitGoal(s.ID, "budget_exhausted", goalStatus(host.GoalBudgetExhausted))
	if g.Goal.EndReason != "max_duration" || g.Goal.TurnsUsed != 1 || g.Goal.ActiveTurnID != "" {
		t.Fatalf("goal = %+v", g.Goal)
	}
	tu := f.expectTurn(s.ID, turn.ID, host.PhaseSettled, host.OutcomeCanceled, host.ReasonGoalBudgetExhausted)
	if tu.CanceledBy != "ensemble:goal" || tu.CancelReason != host.ReasonGoalBudgetExhausted || tu.CanceledByName == "" {
		t.Fatalf("stopped turn = by %q (%q) reason %q", tu.CanceledBy, tu.CanceledByName, tu.CancelReason)
	}
	if took := tu.SettledAt.Sub(g.Goal.StartedAt); took < time.Second || took > 10*time.Second {
		t.Fatalf("the turn was stopped %s after the goal began, budget 1s", took)
	}
	time.Sleep(700 * time.Millisecond) // more than a goal worker pass
	if n := len(f.turnsOldestFirst(s.ID)); n != 1 {
		t.Fatalf("an exhausted goal started another turn: %d turns", n)
	}
	if n := f.runtime.dispatches.Load(); n != 1 {
		t.Fatalf("want 1 dispatch, got %d", n)
	}
	f.expectBusy(s.ID, false)
}}

// GoalIdempotentAndConflict: a retried clientSubmitId returns the same
// operation (also after a restart) and changes nothing; the same id with
// different content is operation_conflict; bad input is typed.
var GoalIdempotentAndConflict = Scenario{Name: "goals/same_id_retry_and_conflict", Run: func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	spec := &host.GoalSpec{Objective: "/sim instant goal-after=1\nOnce", MaxTurns: 2}
	a := f.mustGoal(s.ID, "g1", host.GoalActionSet, spec, "alice")
	b := f.mustGoal(s.ID, "g1", host.GoalActionSet, spec, "alice")
	if !b.Replayed || b.Operation.ID != a.Operation.ID || b.Operation.Revision != 1 {
		t.Fatalf("retry = %+v, first %+v", b.Operation, a.Operation)
	}
	f.waitGoal(s.ID, "achieved", goalStatus(host.GoalAchieved))
	f.crash()
	c := f.mustGoal(s.ID, "g1", host.GoalActionSet, spec, "alice")
	if !c.Replayed || c.Operation.ID != a.Operation.ID || c.State.Revision != 1 {
		t.Fatalf("retry after restart = %+v rev %d", c.Operation, c.State.Revision)
	}
	_, err := f.goal(s.ID, "g1", host.GoalActionSet, &host.GoalSpec{Objective: "something else"}, "alice")
	wantCode(t, err, host.CodeOperationConflict)
	_, err = f.goal(s.ID, "g1", host.GoalActionPause, nil, "alice")
	wantCode(t, err, host.CodeOperationConflict)
	for _, bad := range []host.GoalControlInput{
		{SessionID: s.ID, ClientSubmitID: "x1", Action: "set"},
		{SessionID: s.ID, ClientSubmitID: "x2", Action: "set", Goal: &host.GoalSpec{Objective: "  "}},
		{SessionID: s.ID, ClientSubmitID: "x3", Action: "set", Goal: &host.GoalSpec{Objective: "o", MaxTurns: -1}},
		{SessionID: s.ID, ClientSubmitID: "x4", Action: "set", Goal: &host.GoalSpec{Objective: "o", MaxDuration: "forever"}},
		{SessionID: s.ID, ClientSubmitID: "x5", Action: "pause", Goal: &host.GoalSpec{Objective: "o"}},
		{SessionID: s.ID, ClientSubmitID: "x6", Action: "explode"},
		{SessionID: s.ID, ClientSubmitID: "ensemble:goal:x", Action: "clear"},
	} {
		bad.WorkspaceID = ws
		_, err := f.host.GoalControl(ctx, bad)
		wantCode(t, err, host.CodeInvalidInput)
	}
	_, err = f.goal("no-such-session", "x7", host.GoalActionClear, nil, "alice")
	wantCode(t, err, host.CodeNotFound)
	if g, _ := f.host.GetGoal(ctx, ws, s.ID); g.Revision != 1 {
		t.Fatalf("refused requests changed the goal: revision %d", g.Revision)
	}
	if n := f.runtime.dispatches.Load(); n != 0 {
		t.Fatalf("the restarted host dispatched %d turns for a finished goal", n)
	}
}}

// heldGoal holds the goal reports that match until release is closed: the
// agent's report arrives late, after a newer mutation committed.
type heldGoal struct {
	match   func(host.GoalReport) bool
	release chan struct{}
	held    chan struct{}
	once    sync.Once
	freed   sync.Once
}

func (k *heldGoal) Release() { k.freed.Do(func() { close(k.release) }) }

type heldGoalSink struct {
	host.TurnSink
	h *heldGoal
}

func (k heldGoalSink) ReportGoal(ctx context.Context, r host.GoalReport) error {
	if k.h.match(r) {
		k.h.once.Do(func() { close(k.h.held) })
		<-k.h.release
	}
	return k.TurnSink.ReportGoal(ctx, r)
}

// holdGoalReports wraps every later dispatch's sink.
func (f *fixture) holdGoalReports(match func(host.GoalReport) bool) *heldGoal {
	k := &heldGoal{match: match, release: make(chan struct{}), held: make(chan struct{})}
	f.runtime.mu.Lock()
	f.runtime.wrapSink = func(s host.TurnSink) host.TurnSink { return heldGoalSink{TurnSink: s, h: k} }
	f.runtime.mu.Unlock()
	f.t.Cleanup(k.Release)
	return k
}

func statusIs(s string) func(host.GoalReport) bool {
	return func(r host.GoalReport) bool { return r.Status == s }
}

func waitClosed(t *testing.T, ch chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(15 * time.Second):
		t.Fatalf("%s never happened", what)
	}
}

// GoalReplaceFencesLateResult: replacing the goal while its continuation
// runs fences the old identity before anything else; the old turn's
// verdict ("achieved"), arriving after the fence, never becomes canonical,
// and the new goal arms once the old turn ended.
var GoalReplaceFencesLateResult = Scenario{Name: "goals/replace_fences_late_result", Run: func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	// Turn 1 (arm) reports "continue"; turn 2 (continuation) reports
	// "achieved" and then runs on until cancelled.
	h := f.holdGoalReports(statusIs("achieved"))
	old := f.mustGoal(s.ID, "g1", host.GoalActionSet, &host.GoalSpec{Objective: "/sim instant goal-after=2 goal-hang-from=2\nOld goal"}, "alice")
	var cont host.Turn
	f.waitGoal(s.ID, "running its continuation", func(g host.GoalState) bool {
		if g.Goal == nil || g.Goal.ActiveTurnID == "" || g.Goal.TurnsUsed != 1 {
			return false
		}
		cont, _ = f.host.GetTurn(ctx, ws, s.ID, g.Goal.ActiveTurnID)
		return cont.Accepted()
	})
	if cont.Goal == nil || cont.Goal.Kind != host.OriginGoalContinuation || cont.Goal.OperationID != old.Operation.ID {
		t.Fatalf("continuation provenance = %+v", cont.Goal)
	}
	f.runtime.mu.Lock()
	f.runtime.failCancels = 1 << 20 // the old turn cannot be stopped before its verdict lands
	f.runtime.mu.Unlock()
	waitClosed(t, h.held, "the continuation's verdict")
	repl := f.mustGoal(s.ID, "g2", host.GoalActionSet, &host.GoalSpec{Objective: "/sim hang\nNew goal"}, "bob")
	if repl.Goal.Revision != 2 || repl.Goal.OperationID != repl.Operation.ID || repl.Goal.Generation != 2 {
		t.Fatalf("replace result = %+v", repl.Goal)
	}
	if repl.Operation.State != host.GoalOpAccepted {
		t.Fatalf("replace operation = %q, want accepted (its fence waits for the old turn)", repl.Operation.State)
	}
	h.Release() // the late "achieved" of the fenced generation
	time.Sleep(200 * time.Millisecond)
	f.runtime.mu.Lock()
	f.runtime.failCancels = 0
	f.runtime.mu.Unlock()
	f.expectTurnSettled(s.ID, cont.ID) // the worker's fence pass cancels it
	next := f.waitGoalTurnRunning(s.ID)
	if next.ID == cont.ID || next.Goal.OperationID != repl.Operation.ID || next.Goal.Revision != 2 || next.Goal.Kind != host.OriginGoalArm {
		t.Fatalf("new generation turn = %+v", next.Goal)
	}
	g, _ := f.host.GetGoal(ctx, ws, s.ID)
	if g.Goal == nil || g.Goal.Status != host.GoalActive || g.Goal.OperationID != repl.Operation.ID || g.Goal.TurnsUsed != 0 ||
		(g.Observed != nil && g.Observed.Status == "achieved") {
		t.Fatalf("the fenced generation's verdict landed: %+v observed %+v", g.Goal, g.Observed)
	}
	// The operation is marked applied in its own commit once its fence is
	// done; the new generation's turn may start before that commit lands.
	deadline := time.Now().Add(20 * time.Second)
	for {
		op, err := f.store.GetGoalOperation(ctx, ws, "g2")
		if err == nil && op.State == host.GoalOpApplied {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replace operation after the fence = %+v, %v", op, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	f.mustGoal(s.ID, "g3", host.GoalActionClear, nil, "bob")
	f.expectTurnSettled(s.ID, next.ID)
}}

func (f *fixture) expectTurnSettled(sid, turnID string) host.Turn {
	f.t.Helper()
	return f.waitSettled(host.Turn{WorkspaceID: ws, SessionID: sid, ID: turnID})
}

// GoalProviderAdoption: the agent sets a goal itself during a user turn
// (the _ensemble/goal "set" notification); the Host adopts it as an
// applied operation with a new revision and runs the loop for it.
var GoalProviderAdoption = Scenario{Name: "goals/provider_adoption", Run: func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	u := f.mustSend(s.ID, "u1", "/sim instant goal-set=Write-the-docs\nplease own this")
	f.waitSettled(u)
	g := f.waitGoal(s.ID, "adopted", func(g host.GoalState) bool { return g.Goal != nil })
	if g.Goal.Source != "provider" || g.Goal.Objective != "Write the docs" || g.Revision != 1 ||
		g.Observed == nil || g.Observed.Status != "set" || g.Observed.TurnID != u.ID {
		t.Fatalf("adopted goal = %+v observed %+v", g.Goal, g.Observed)
	}
	f.waitGoalTurnRunning(s.ID) // the loop runs the provider's goal
	c := f.mustGoal(s.ID, "g1", host.GoalActionClear, nil, "alice")
	if c.State.Revision != 2 {
		t.Fatalf("clear after adoption: revision %d", c.State.Revision)
	}
}}

// GoalAdoptionLosesToNewerUserMutation: a provider goal observed before a
// newer user set reaches the Host after it; the user's revision wins.
var GoalAdoptionLosesToNewerUserMutation = Scenario{Name: "goals/adoption_races_user_mutation", Run: func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	held := f.holdGoalReports(statusIs("set"))
	u := f.mustSend(s.ID, "u1", "/sim goal-set=Provider-idea hang\nthink about it")
	waitClosed(t, held.held, "the provider's goal report")
	user := f.mustGoal(s.ID, "g1", host.GoalActionSet, &host.GoalSpec{Objective: "/sim instant goal-after=1\nUser goal"}, "alice")
	held.Release()
	if _, err := f.host.CancelTurn(ctx, host.CancelInput{WorkspaceID: ws, SessionID: s.ID, TurnID: u.ID, Wait: 10 * time.Second}); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	g := f.waitGoal(s.ID, "achieved", goalStatus(host.GoalAchieved))
	if g.Goal.OperationID != user.Operation.ID || g.Goal.Source != "user" || g.Revision != 1 {
		t.Fatalf("the stale provider goal overwrote the user's: %+v (rev %d)", g.Goal, g.Revision)
	}
	if _, err := f.store.GetGoalOperation(ctx, ws, "g1"); err != nil {
		t.Fatalf("user op: %v", err)
	}
}}

// GoalCrashDuringTurnStaysUnknown: a crash while a goal turn runs; the
// restart settles it failed/execution_status_unknown (never redispatched)
// and the goal pauses for a person instead of guessing.
var GoalCrashDuringTurnStaysUnknown = Scenario{Name: "goals/crash_during_turn_stays_unknown", Run: func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	f.mustGoal(s.ID, "g1", host.GoalActionSet, &host.GoalSpec{Objective: "/sim hang\nLong work"}, "alice")
	turn := f.waitGoalTurnRunning(s.ID)
	f.crash()
	f.expectTurn(s.ID, turn.ID, host.PhaseSettled, host.OutcomeFailed, host.ReasonExecutionStatusUnknown)
	g := f.waitGoal(s.ID, "paused", goalStatus(host.GoalPaused))
	if g.Goal.EndReason != "turn_failed:execution_status_unknown" {
		t.Fatalf("goal = %+v", g.Goal)
	}
	time.Sleep(700 * time.Millisecond)
	if n := f.runtime.dispatches.Load(); n != 0 {
		t.Fatalf("the restart dispatched %d goal turns", n)
	}
	f.expectBusy(s.ID, false)
}}

// GoalCrashWithPendingFence: a pause whose fence could not stop the live
// turn (its cancel never reached the agent), then a crash. Recovery runs
// the fence before stale turns: the fenced turn ends interrupted
// (goal_fenced) without any provider call, the operation completes, and
// nothing is dispatched.
var GoalCrashWithPendingFence = Scenario{Name: "goals/crash_with_pending_fence", Run: func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	f.mustGoal(s.ID, "g1", host.GoalActionSet, &host.GoalSpec{Objective: "/sim hang\nLong work"}, "alice")
	turn := f.waitGoalTurnRunning(s.ID)
	f.runtime.mu.Lock()
	f.runtime.failCancels = 1 << 20
	f.runtime.mu.Unlock()
	p := f.mustGoal(s.ID, "g2", host.GoalActionPause, nil, "bob")
	if p.Operation.State != host.GoalOpAccepted || p.Goal.Status != host.GoalPaused {
		t.Fatalf("pause with an unstoppable turn = %+v / %+v", p.Operation, p.Goal)
	}
	f.crash()
	f.expectTurn(s.ID, turn.ID, host.PhaseSettled, host.OutcomeInterrupted, "goal_fenced")
	op, err := f.host.GoalOperation(ctx, ws, "g2")
	if err != nil || op.State != host.GoalOpApplied {
		t.Fatalf("pause operation after recovery = %+v, %v", op, err)
	}
	retry := f.mustGoal(s.ID, "g2", host.GoalActionPause, nil, "bob")
	if !retry.Replayed || retry.Operation.ID != p.Operation.ID {
		t.Fatalf("retry after recovery = %+v", retry.Operation)
	}
	if n := f.runtime.dispatches.Load(); n != 0 {
		t.Fatalf("recovery dispatched %d turns", n)
	}
	if g, _ := f.host.GetGoal(ctx, ws, s.ID); g.Goal == nil || g.Goal.Status != host.GoalPaused {
		t.Fatalf("goal after recovery = %+v", g.Goal)
	}
}}

// GoalInitialSessionGoal: session.create with a typed goal (exclusive with
// content) creates a visible session, no turn until the goal arms; a retry
// returns the same session and operation.
var GoalInitialSessionGoal = Scenario{Name: "goals/create_with_initial_goal", Run: func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	in := host.CreateSessionInput{WorkspaceID: ws, ClientSubmitID: "c1", CreatedBy: "alice",
		Goal: &host.GoalSpec{Objective: "/sim instant goal-after=1\nStart here"}}
	r, err := f.host.CreateSession(ctx, in)
	if err != nil {
		t.Fatalf("create with goal: %v", err)
	}
	if r.Turn != nil || r.Goal == nil || !r.Goal.IntentAccepted || r.Goal.Operation.Action != "set" {
		t.Fatalf("create result = %+v", r)
	}
	again, err := f.host.CreateSession(ctx, in)
	if err != nil || again.Session.ID != r.Session.ID || again.Goal.Operation.ID != r.Goal.Operation.ID {
		t.Fatalf("retry = %+v, %v", again, err)
	}
	f.waitGoal(r.Session.ID, "achieved", goalStatus(host.GoalAchieved))
	bad := in
	bad.ClientSubmitID = "c2"
	bad.Content = &host.MessageContent{Text: "hi"}
	_, err = f.host.CreateSession(ctx, bad)
	wantCode(t, err, host.CodeInvalidInput)
}}

// GoalCrashBeforeDispatch: the goal armed its turn (admitted, durable) but
// the agent never got the prompt, then the process died. After the
// restart the same queued turn is dispatched exactly once (no second goal
// turn is admitted for it) and the goal completes.
var GoalCrashBeforeDispatch = Scenario{Name: "goals/crash_before_dispatch_sends_once", Run: func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	f.runtime.set(func(r *probeRuntime) {
		r.beforeDispatch = func(host.DispatchRequest) error {
			return &host.LocalError{Code: "session_busy", Message: "the agent is not taking prompts"}
		}
	})
	f.mustGoal(s.ID, "g1", host.GoalActionSet, &host.GoalSpec{Objective: "/sim instant goal-after=1\nOnce"}, "alice")
	g := f.waitGoal(s.ID, "armed", func(g host.GoalState) bool { return g.Goal != nil && g.Goal.ActiveTurnID != "" })
	// The refused dispatch passes through dispatched on its way back to
	// queued (and the reconciler retries it): wait for queued.
	arm := f.waitTurn(host.Turn{WorkspaceID: ws, SessionID: s.ID, ID: g.Goal.ActiveTurnID}, "queued",
		func(t host.Turn) bool { return t.Phase == host.PhaseQueued })
	f.crash()
	// The restarted agent cannot load the old provider session (no state
	// dir here): nothing is sent until a member continues fresh.
	f.waitContextLost(s.ID)
	if n := f.runtime.dispatches.Load(); n != 0 {
		t.Fatalf("dispatched %d times into a lost context", n)
	}
	if _, err := f.host.ContinueFresh(ctx, host.ContinueFreshInput{WorkspaceID: ws, SessionID: s.ID}); err != nil {
		t.Fatalf("continue fresh: %v", err)
	}
	g = f.waitGoal(s.ID, "achieved", goalStatus(host.GoalAchieved))
	if g.Goal.TurnsUsed != 1 {
		t.Fatalf("goal = %+v", g.Goal)
	}
	turns := f.turnsOldestFirst(s.ID)
	if len(turns) != 1 || turns[0].ID != arm.ID || turns[0].Outcome != host.OutcomeCompleted {
		t.Fatalf("turns after restart = %+v", turns)
	}
	if n := f.runtime.dispatches.Load(); n != 1 {
		t.Fatalf("the restarted host dispatched %d times, want 1", n)
	}
	f.expectClaim(arm.ClientSubmitID, host.ClaimAccepted)
}}

// GoalCrashBeforeArm: the process dies right after a goal set commits and
// before its first turn is armed, at both steps in between: (a) with the
// operation still accepted, (b) after it was marked applied. The caller
// never heard back. Recovery finishes the operation; the restarted goal
// worker arms exactly once (one goal_arm turn with the set's provenance,
// one dispatch) and the goal completes; a retry of the same
// clientSubmitId then replays the operation and arms nothing.
var GoalCrashBeforeArm = Scenario{Name: "goals/crash_between_set_and_arm_arms_once", Run: func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	spec := &host.GoalSpec{Objective: "/sim instant goal-after=1\nArm me once", MaxTurns: 3}
	for _, step := range []struct {
		name      string
		die       func(tx *faultTx) bool
		wantState host.GoalOperationState
	}{
		{"after the set commit", func(tx *faultTx) bool { return tx.goalOpInserted }, host.GoalOpAccepted},
		{"after the operation was applied", func(tx *faultTx) bool { return tx.goalOpUpdated }, host.GoalOpApplied},
	} {
		s := f.createEmpty()
		csid := "g-" + s.ID
		// Only the goal.control call runs in the dying process: its
		// workers are stopped so nothing else can arm the goal first.
		f.stopOps()
		old, oldN := f.runtime, f.runtime.dispatches.Load()
		f.store.dieAfterCommit(step.die)
		if _, err := f.goal(s.ID, csid, host.GoalActionSet, spec, "alice"); err == nil {
			t.Fatalf("%s: the dying process answered the set", step.name)
		}
		before, err := f.open(t).GetGoalOperation(ctx, ws, csid)
		if err != nil || before.State != step.wantState {
			t.Fatalf("%s: durable operation at the crash = %+v, %v", step.name, before, err)
		}
		if n := len(f.turnsOldestFirst(s.ID)); n != 0 {
			t.Fatalf("%s: a turn exists before the restart: %d", step.name, n)
		}
		f.crash()
		// Recovery itself finished the operation (nobody retried yet).
		if op, err := f.host.GoalOperation(ctx, ws, csid); err != nil || op.State != host.GoalOpApplied {
			t.Fatalf("%s: operation after recovery = %+v, %v", step.name, op, err)
		}
		g := f.waitGoal(s.ID, "achieved", goalStatus(host.GoalAchieved))
		// A late client retry replays the operation and arms nothing.
		retry := f.mustGoal(s.ID, csid, host.GoalActionSet, spec, "alice")
		if !retry.Replayed || retry.Operation.ID != before.ID {
			t.Fatalf("%s: retry after restart = %+v", step.name, retry.Operation)
		}
		if g.Goal.TurnsUsed != 1 || g.Goal.OperationID != before.ID || g.Revision != 1 {
			t.Fatalf("%s: goal = %+v (rev %d)", step.name, g.Goal, g.Revision)
		}
		time.Sleep(700 * time.Millisecond) // more than a goal worker pass
		turns := f.turnsOldestFirst(s.ID)
		if len(turns) != 1 || turns[0].Origin != host.OriginGoalArm || turns[0].Goal == nil ||
			turns[0].Goal.OperationID != before.ID || turns[0].Goal.Revision != 1 || turns[0].Outcome != host.OutcomeCompleted {
			t.Fatalf("%s: want exactly one completed goal_arm turn, got %+v", step.name, turns)
		}
		if n := old.dispatches.Load() - oldN; n != 0 {
			t.Fatalf("%s: the dead process dispatched %d turns", step.name, n)
		}
		if n := f.runtime.dispatches.Load(); n != 1 {
			t.Fatalf("%s: the restarted host dispatched %d times, want 1", step.name, n)
		}
		op, err := f.host.GoalOperation(ctx, ws, csid)
		if err != nil || op.State != host.GoalOpApplied {
			t.Fatalf("%s: operation after restart = %+v, %v", step.name, op, err)
		}
	}
}}

// GoalCorruptRecordQuarantined: an active goal record and an accepted goal
// operation whose stored rows no longer decode. Recovery quarantines both
// and reports them; the corrupt goal never arms, goal.get and goal.control
// answer goal_record_corrupt, the healthy goals run as usual, and the next
// start does not trip over the quarantined rows again.
var GoalCorruptRecordQuarantined = Scenario{Name: "goals/corrupt_record_is_quarantined", Run: func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	a, b, c := f.createEmpty(), f.createEmpty(), f.createEmpty()
	spec := &host.GoalSpec{Objective: "/sim instant goal-after=1\nRun once"}
	f.stopOps() // nothing arms before the rows are corrupted
	f.mustGoal(a.ID, "ga", host.GoalActionSet, spec, "alice")
	f.mustGoal(b.ID, "gb", host.GoalActionSet, spec, "alice")
	// c's operation stays accepted: the process dies right after it.
	f.store.dieAfterCommit(func(tx *faultTx) bool { return tx.goalOpInserted })
	_, _ = f.goal(c.ID, "gc", host.GoalActionSet, spec, "alice")
	d.CorruptGoal(t, f.store.Store, ws, a.ID)
	d.CorruptGoalOperation(t, f.store.Store, ws, "gc")

	rep := f.crash()
	got := map[string]string{}
	for _, q := range rep.Quarantined {
		got[q.Kind] = q.Key
		if q.Reason == "" {
			t.Fatalf("quarantined without a reason: %+v", q)
		}
	}
	if len(rep.Quarantined) != 2 || got[host.QuarantineKindGoal] != ws+"/"+a.ID ||
		got[host.QuarantineKindGoalOperation] != ws+"/gc" {
		t.Fatalf("quarantined: %+v", rep.Quarantined)
	}
	// The healthy goals run (c's goal record is intact; only its
	// operation record is set aside).
	f.waitGoal(b.ID, "achieved", goalStatus(host.GoalAchieved))
	f.waitGoal(c.ID, "achieved", goalStatus(host.GoalAchieved))
	time.Sleep(700 * time.Millisecond) // more than a goal worker pass
	if n := len(f.turnsOldestFirst(a.ID)); n != 0 {
		t.Fatalf("the corrupt goal armed %d turns", n)
	}
	if n := f.runtime.dispatches.Load(); n != 2 {
		t.Fatalf("want 2 dispatches (b and c), got %d", n)
	}
	_, err := f.host.GetGoal(ctx, ws, a.ID)
	wantReason(t, err, host.CodeInternal, host.ReasonGoalRecordCorrupt)
	_, err = f.goal(a.ID, "ga2", host.GoalActionPause, nil, "bob")
	wantReason(t, err, host.CodeInternal, host.ReasonGoalRecordCorrupt)
	_, err = f.host.GoalOperation(ctx, ws, "gc")
	wantReason(t, err, host.CodeInternal, host.ReasonGoalRecordCorrupt)
	if rep := f.crash(); len(rep.Quarantined) != 0 {
		t.Fatalf("second start quarantined again: %+v", rep.Quarantined)
	}
}}
