package host

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// goalPoll is how often the goal worker rescans when nothing woke it.
const goalPoll = 500 * time.Millisecond

// goalWorker is the Host's goal loop state (one per Host).
type goalWorker struct {
	once sync.Once
	wake chan struct{}
	mu   sync.Mutex
	busy map[string]bool // sessions an advance runs for right now
}

func (w *goalWorker) init() {
	w.once.Do(func() {
		w.wake = make(chan struct{}, 1)
		w.busy = map[string]bool{}
	})
}

// wakeGoals nudges the goal worker (non-blocking).
func (h *Host) wakeGoals() {
	h.goals.init()
	select {
	case h.goals.wake <- struct{}{}:
	default:
	}
}

// runGoals is the goal worker: fences first, then accepted goal
// operations, then the loop of every active goal, until ctx ends.
func (h *Host) runGoals(ctx context.Context) {
	h.goals.init()
	var wg sync.WaitGroup
	defer wg.Wait()
	tick := time.NewTicker(goalPoll)
	defer tick.Stop()
	for {
		h.goalPass(ctx, &wg)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-h.goals.wake:
		}
	}
}

func (h *Host) goalPass(ctx context.Context, wg *sync.WaitGroup) {
	if fences, err := h.store.PendingGoalFences(ctx); err == nil {
		for _, f := range fences {
			if ctx.Err() != nil {
				return
			}
			if _, mine, err := h.ownSession(ctx, f.WorkspaceID, f.SessionID, ""); err == nil && mine {
				h.processFence(ctx, f, false, 0)
			}
		}
	} else if ctx.Err() == nil {
		h.log.Warn("goal worker: fences", "err", err)
	}
	if ops, bad, err := h.store.PendingGoalOperations(ctx); err == nil {
		if _, err := h.quarantineGoalRecords(ctx, bad); err != nil && ctx.Err() == nil {
			h.log.Warn("goal worker: quarantine", "err", err)
		}
		for _, op := range ops {
			if ctx.Err() != nil {
				return
			}
			if _, mine, err := h.ownSession(ctx, op.WorkspaceID, op.SessionID, ""); err == nil && mine {
				h.finishGoalOp(ctx, op, 0)
			}
		}
	}
	goals, bad, err := h.store.LiveGoals(ctx)
	if err != nil {
		if ctx.Err() == nil {
			h.log.Warn("goal worker: live goals", "err", err)
		}
		return
	}
	if _, err := h.quarantineGoalRecords(ctx, bad); err != nil && ctx.Err() == nil {
		h.log.Warn("goal worker: quarantine", "err", err)
	}
	for _, g := range goals {
		key := g.WorkspaceID + "/" + g.SessionID
		h.goals.mu.Lock()
		if h.goals.busy[key] {
			h.goals.mu.Unlock()
			continue
		}
		h.goals.busy[key] = true
		h.goals.mu.Unlock()
		// One session's dispatch (up to the acceptance barrier) must not
		// hold up the others.
		wg.Go(func() {
			defer func() {
				h.goals.mu.Lock()
				delete(h.goals.busy, key)
				h.goals.mu.Unlock()
			}()
			if err := h.advanceGoal(ctx, g.WorkspaceID, g.SessionID); err != nil && ctx.Err() == nil {
				h.log.Warn("goal worker: advance", "session", g.SessionID, "err", err)
			}
		})
	}
}

// advanceGoal takes one step of an active goal: decide on its settled goal
// turn, end it on budget, or admit and dispatch its next goal turn.
func (h *Host) advanceGoal(ctx context.Context, ws, sid string) error {
	if _, mine, err := h.ownSession(ctx, ws, sid, ""); err != nil || !mine {
		return err // the owner's worker runs it
	}
	// A deleted session's goal is left exactly as it was (restore is
	// lossless); the loop never acts on it.
	s, err := h.store.GetSession(ctx, ws, sid)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if !visible(s) {
		return nil
	}
	st, err := h.goalState(ctx, ws, sid)
	if err != nil || st.Goal == nil || st.Goal.Status != GoalActive {
		return err
	}
	g := st.Goal
	if g.ActiveTurnID != "" {
		t, err := h.store.GetTurn(ctx, ws, sid, g.ActiveTurnID)
		if err != nil {
			return err
		}
		if !t.Settled() {
			return h.enforceTimeBudget(ctx, g, t) // it runs; its settlement wakes us
		}
		return h.decideGoalTurn(ctx, t)
	}
	now := h.nowUTC()
	if g.TurnsUsed >= g.turnBudget() || now.Sub(g.StartedAt) >= g.timeBudget() {
		return h.endGoal(ctx, ws, sid, g.OperationID, g.Revision, GoalBudgetExhausted, "budget")
	}
	if s.ActiveTurnID != "" || s.ContextLost {
		return nil // a person's turn (or a fenced goal turn) runs first
	}
	return h.admitGoalTurn(ctx, st)
}

// enforceTimeBudget stops a running goal turn once the goal's wall time
// budget is spent: without it a hanging turn would outlive maxDuration,
// which is otherwise only checked between turns. It runs on the goal
// worker's existing pass (no timer per goal) and goes through the normal
// cancel path, whose durable intent the reconciler redelivers; the
// decision then ends the goal budget_exhausted.
func (h *Host) enforceTimeBudget(ctx context.Context, g *Goal, t Turn) error {
	if t.CancelRequested || !currentProvenance(g, t) || h.nowUTC().Sub(g.StartedAt) < g.timeBudget() {
		return nil
	}
	h.log.Info("goal: wall time budget spent; stopping the running goal turn",
		"session", t.SessionID, "turn", t.ID, "maxDuration", g.timeBudget().String())
	_, err := h.CancelTurn(ctx, CancelInput{WorkspaceID: t.WorkspaceID, SessionID: t.SessionID, TurnID: t.ID,
		By: "ensemble:goal", ByName: "goal budget (" + g.timeBudget().String() + " wall time)",
		Reason: ReasonGoalBudgetExhausted})
	if err != nil {
		return fmt.Errorf("goal: stop turn %s over its time budget: %w", t.ID, err)
	}
	return nil
}

// admitGoalTurn admits the goal's next turn through the ordinary admission
// (admit + dispatch), marked with the goal's exact provenance, and only if
// the goal is still exactly the identity this call read.
func (h *Host) admitGoalTurn(ctx context.Context, read GoalState) error {
	g := read.Goal
	prov := GoalProvenance{Kind: OriginGoalContinuation, OperationID: g.OperationID,
		Revision: g.Revision, Generation: g.Generation, Number: g.TurnsUsed + 1}
	if g.TurnsUsed == 0 || g.ArmedRevision != g.Revision {
		prov.Kind = OriginGoalArm
	}
	// The reserved id makes the admission itself idempotent: one turn per
	// goal identity and number, whatever retries or restarts happen.
	csid := fmt.Sprintf("ensemble:goal:%s:%d:%d", g.OperationID, g.Revision, prov.Number)
	content := goalPrompt(g, prov)
	unlock := h.locks.lock(read.WorkspaceID, read.SessionID)
	turnID := h.newID("turn")
	h.work.drive(turnID)
	var sess Session
	var turn Turn
	var claim SubmitClaim
	err := h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		s, err := visibleSession(ctx, tx, read.WorkspaceID, read.SessionID)
		if err != nil {
			return err
		}
		cur, err := loadGoal(ctx, tx, read.WorkspaceID, read.SessionID)
		if err != nil {
			return err
		}
		if cur.Goal == nil || cur.Goal.Status != GoalActive || cur.Goal.OperationID != g.OperationID ||
			cur.Goal.Revision != g.Revision || cur.Goal.ActiveTurnID != "" || cur.Goal.TurnsUsed != g.TurnsUsed {
			return errGoalMoved
		}
		if s.ActiveTurnID != "" {
			return errGoalMoved
		}
		if held, err := goalHeld(ctx, tx, cur); err != nil || held {
			return cmp.Or(err, errGoalMoved)
		}
		if _, err := tx.Claim(ctx, read.WorkspaceID, csid); err == nil {
			return errGoalMoved // admitted before (the decision reads it back)
		} else if !errors.Is(err, ErrNotFound) {
			return err
		}
		sess, turn, claim, err = h.admit(ctx, tx, emit, s, turnID, csid, content, content.Digest(), g.SetBy, g.SetByName, PhaseQueued)
		if err != nil {
			return err
		}
		turn.Origin, turn.Goal = prov.Kind, &prov
		if err := tx.UpdateTurn(ctx, turn); err != nil {
			return err
		}
		ng := *cur.Goal
		ng.ActiveTurnID, ng.ArmedRevision, ng.UpdatedAt = turn.ID, g.Revision, turn.CreatedAt
		cur.Goal, cur.Seq, cur.UpdatedAt = &ng, cur.Seq+1, turn.CreatedAt
		return putGoal(ctx, tx, emit, cur)
	})
	unlock()
	if err != nil {
		h.work.release(turnID)
		if errors.Is(err, errGoalMoved) {
			return nil
		}
		return err
	}
	if _, err := h.dispatch(ctx, sess, turn, claim, false); err != nil {
		// The turn is durable: a failure before the provider saw it leaves
		// it queued for the reconciler; an unknown outcome is settled
		// failed and the decision pauses the goal.
		h.log.Info("goal turn dispatch", "turn", turn.ID, "err", err)
	}
	return nil
}

var errGoalMoved = errors.New("goal moved on")

// goalSignal is the agent's structured verdict: the status it reported
// through the _ensemble/goal notification for this very turn, else the
// text convention "GOAL: ACHIEVED" / "GOAL: FAILED" on a line of its reply.
var goalLine = regexp.MustCompile(`(?mi)^\s*GOAL:\s*(ACHIEVED|FAILED|CONTINUE)\b`)

func (h *Host) goalSignal(ctx context.Context, st GoalState, t Turn) string {
	if o := st.Observed; o != nil && o.TurnID == t.ID && o.Status != "" {
		return o.Status
	}
	p, err := h.store.ListMessages(ctx, t.WorkspaceID, t.SessionID, MessageQuery{TurnID: t.ID, Limit: 1000})
	if err != nil {
		return ""
	}
	verdict := ""
	for _, m := range p.Messages {
		if m.Role != RoleAgent || m.Kind != KindText {
			continue
		}
		for _, sm := range goalLine.FindAllStringSubmatch(m.Content.Text, -1) {
			verdict = strings.ToLower(sm[1]) // the last one wins
		}
	}
	return verdict
}

// decideGoalTurn is the loop's decision after a goal turn settled. Only a
// turn carrying the goal's current provenance advances it; anything else
// (a fenced generation's late result) changes nothing.
func (h *Host) decideGoalTurn(ctx context.Context, t Turn) error {
	st, err := h.goalState(ctx, t.WorkspaceID, t.SessionID)
	if err != nil {
		return err
	}
	signal := h.goalSignal(ctx, st, t)
	return h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		if s, err := tx.Session(ctx, t.WorkspaceID, t.SessionID); err != nil || !visible(s) {
			return err // a deleted session's goal stays exactly as it was
		}
		cur, err := loadGoal(ctx, tx, t.WorkspaceID, t.SessionID)
		if err != nil {
			return err
		}
		g := cur.Goal
		if g == nil || g.ActiveTurnID != t.ID || !currentProvenance(g, t) {
			return nil
		}
		// A held identity (deleted, restored or imported) is not decided:
		// it waits, exactly as it is, for a person's resume.
		if held, err := goalHeld(ctx, tx, cur); err != nil || held {
			return err
		}
		ng := *g
		now := h.nowUTC()
		ng.ActiveTurnID, ng.UpdatedAt = "", now
		switch {
		case t.Outcome == OutcomeCompleted:
			ng.TurnsUsed++
			switch {
			case signal == "achieved":
				ng.Status, ng.EndReason = GoalAchieved, "agent_reported"
			case signal == "failed":
				ng.Status, ng.EndReason = GoalFailed, "agent_reported"
			case ng.TurnsUsed >= ng.turnBudget():
				ng.Status, ng.EndReason = GoalBudgetExhausted, "max_turns"
			case now.Sub(ng.StartedAt) >= ng.timeBudget():
				ng.Status, ng.EndReason = GoalBudgetExhausted, "max_duration"
			}
		case t.CancelReason == ReasonGoalBudgetExhausted:
			// The Host stopped it because the wall time ran out: whatever
			// the runtime reported after that, the budget is spent.
			ng.TurnsUsed++
			ng.Status, ng.EndReason = GoalBudgetExhausted, "max_duration"
		case t.Outcome == OutcomeCanceled && t.CanceledBy != "" && t.CanceledBy != "ensemble:goal":
			// A person stopped the goal turn: the goal waits for them.
			ng.TurnsUsed++
			ng.Status, ng.PausedBy, ng.PausedByName, ng.EndReason = GoalPaused, t.CanceledBy, t.CanceledByName, "turn_canceled"
		default:
			// Failed or unknown: never guessed. The goal stops (paused)
			// so a person decides; nothing is redispatched.
			ng.TurnsUsed++
			ng.Status, ng.EndReason = GoalPaused, "turn_"+string(t.Outcome)
			if t.FailureReason != "" {
				ng.EndReason += ":" + t.FailureReason
			}
		}
		cur.Goal, cur.Seq, cur.UpdatedAt = &ng, cur.Seq+1, now
		return putGoal(ctx, tx, emit, cur)
	})
}

// endGoal moves the exact goal identity to a terminal status.
func (h *Host) endGoal(ctx context.Context, ws, sid, opID string, rev int64, status GoalStatus, reason string) error {
	return h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		if s, err := tx.Session(ctx, ws, sid); err != nil || !visible(s) {
			return err
		}
		cur, err := loadGoal(ctx, tx, ws, sid)
		if err != nil {
			return err
		}
		g := cur.Goal
		if g == nil || g.Status != GoalActive || g.OperationID != opID || g.Revision != rev || g.ActiveTurnID != "" {
			return nil
		}
		if held, err := goalHeld(ctx, tx, cur); err != nil || held {
			return err
		}
		ng := *g
		now := h.nowUTC()
		ng.Status, ng.EndReason, ng.UpdatedAt = status, reason, now
		cur.Goal, cur.Seq, cur.UpdatedAt = &ng, cur.Seq+1, now
		return putGoal(ctx, tx, emit, cur)
	})
}

// goalHeld reports whether an active goal's current identity is fenced
// without a newer revision replacing it: the deletion coordinator and
// import fence it so a deleted-then-restored or an imported goal keeps its
// exact bytes yet never arms, continues or ends by itself (restore starts
// no agent). Only a person's goal.control (resume, pause, set, clear)
// moves it on, to a new, unfenced revision.
func goalHeld(ctx context.Context, tx Tx, st GoalState) (bool, error) {
	g := st.Goal
	if g == nil || g.Status != GoalActive {
		return false, nil
	}
	return tx.GoalFenced(ctx, st.WorkspaceID, st.SessionID, g.OperationID, g.Revision)
}

// currentProvenance reports whether a goal turn belongs to the goal's
// current identity, the only one that may advance it.
func currentProvenance(g *Goal, t Turn) bool {
	return g != nil && t.Goal != nil && t.Goal.OperationID == g.OperationID && t.Goal.Revision == g.Revision
}

// goalPrompt is the prompt of a goal turn. A first objective line starting
// with "/sim" goes first, so the sim agent's directives apply.
func goalPrompt(g *Goal, p GoalProvenance) MessageContent {
	obj := g.Objective
	var lead string
	if first, rest, _ := strings.Cut(obj, "\n"); strings.HasPrefix(first, "/sim") {
		lead, obj = first+"\n", strings.TrimSpace(rest)
		if obj == "" {
			obj = first
		}
	}
	var b strings.Builder
	b.WriteString(lead)
	fmt.Fprintf(&b, "[goal turn %d of %d · revision %d · %s]\n", p.Number, g.turnBudget(), p.Revision, p.Kind)
	fmt.Fprintf(&b, "Objective: %s\n", obj)
	if g.Criteria != "" {
		fmt.Fprintf(&b, "Completion criteria: %s\n", g.Criteria)
	}
	if p.Kind == OriginGoalArm {
		b.WriteString("Work toward this objective.")
	} else {
		b.WriteString("Continue working toward this objective.")
	}
	b.WriteString(" When it is achieved, send the ACP notification _ensemble/goal with status \"achieved\"" +
		" (or end your reply with a line \"GOAL: ACHIEVED\"); if it cannot be achieved, status \"failed\"" +
		" (or \"GOAL: FAILED\").")
	// The first goal turn's display text also names a fresh session.
	display := "Goal: " + excerptGoal(obj, 200)
	if p.Number > 1 {
		display = fmt.Sprintf("Goal turn %d: %s", p.Number, excerptGoal(obj, 200))
	}
	return MessageContent{Text: b.String(), DisplayText: display}
}

func excerptGoal(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}
