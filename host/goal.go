package host

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Goals: a durable objective the Host pursues across turns. Agents behind
// ACP have no goal protocol, so the Host runs the loop itself: while a goal
// is active it admits goal_arm and then goal_continuation turns through the
// ordinary admission (admit/dispatch), each carrying the exact goal
// operation id and revision as provenance, and decides after each settles.

// Goal limits and defaults.
const (
	maxGoalText        = 8000
	maxGoalTurns       = 100
	defaultGoalTurns   = 10
	maxGoalDuration    = 24 * time.Hour
	defaultGoalTimeout = time.Hour
	// fenceWait is how long a goal.control call waits for a fenced turn
	// to stop before it answers (the operation stays accepted after it).
	fenceWait = 5 * time.Second
)

// GoalControlInput is one typed goal mutation.
type GoalControlInput struct {
	WorkspaceID    string
	SessionID      string
	ClientSubmitID string
	Action         string
	Goal           *GoalSpec
	By, ByName     string
}

// GoalControlResult keeps the durable intent apart from its effects:
// IntentAccepted is true as soon as the goal operation is durable, even
// when fencing or arming then fails (the worker finishes it).
type GoalControlResult struct {
	// Goal is the durable desired projection after the operation (absent
	// when the session has no goal or it was cleared).
	Goal           *Goal
	State          GoalState
	IntentAccepted bool
	Operation      GoalOperation
	Replayed       bool
}

func (in GoalControlInput) validate() (*GoalSpec, error) {
	if err := requireIDs(in.WorkspaceID, in.SessionID); err != nil {
		return nil, err
	}
	switch in.Action {
	case GoalActionSet:
		if in.Goal == nil {
			return nil, Errorf(CodeInvalidInput, "goal is required for set")
		}
		return normalizeGoalSpec(*in.Goal)
	case GoalActionPause, GoalActionResume, GoalActionClear:
		if in.Goal != nil {
			return nil, Errorf(CodeInvalidInput, "goal is only allowed with set")
		}
		return nil, nil
	}
	return nil, Errorf(CodeInvalidInput, "action must be set, pause, resume or clear")
}

func normalizeGoalSpec(g GoalSpec) (*GoalSpec, error) {
	g.Objective, g.Criteria = strings.TrimSpace(g.Objective), strings.TrimSpace(g.Criteria)
	switch {
	case g.Objective == "":
		return nil, Errorf(CodeInvalidInput, "goal.objective is required")
	case len(g.Objective) > maxGoalText || len(g.Criteria) > maxGoalText:
		return nil, Errorf(CodeInvalidInput, "goal.objective and goal.criteria are limited to %d bytes", maxGoalText)
	case !utf8.ValidString(g.Objective) || !utf8.ValidString(g.Criteria):
		return nil, Errorf(CodeInvalidInput, "goal text must be UTF-8")
	case g.MaxTurns < 0 || g.MaxTurns > maxGoalTurns:
		return nil, Errorf(CodeInvalidInput, "goal.maxTurns must be between 1 and %d", maxGoalTurns)
	}
	if g.MaxDuration != "" {
		d, err := time.ParseDuration(g.MaxDuration)
		if err != nil || d <= 0 || d > maxGoalDuration {
			return nil, Errorf(CodeInvalidInput, "goal.maxDuration must be a duration such as \"30m\", at most %s", maxGoalDuration)
		}
		g.MaxDuration = d.String()
	}
	return &g, nil
}

func (g *Goal) turnBudget() int {
	if g.MaxTurns > 0 {
		return g.MaxTurns
	}
	return defaultGoalTurns
}

func (g *Goal) timeBudget() time.Duration {
	if d, err := time.ParseDuration(g.MaxDuration); err == nil && d > 0 {
		return d
	}
	return defaultGoalTimeout
}

// GoalControl applies one goal mutation. The goal operation is committed
// first, with the new desired projection, a goal_state fact and (for
// pause, clear and replace) a fence on the previous goal identity, all in
// one transaction. The same ClientSubmitID returns the same operation on
// any replica and after restarts; different content under it is
// operation_conflict.
func (h *Host) GoalControl(ctx context.Context, in GoalControlInput) (GoalControlResult, error) {
	if err := requireClientID(in.ClientSubmitID); err != nil {
		return GoalControlResult{}, err
	}
	spec, err := in.validate()
	if err != nil {
		return GoalControlResult{}, err
	}
	digest := goalDigest(in.SessionID, in.Action, spec)
	if op, err := h.store.GetGoalOperation(ctx, in.WorkspaceID, in.ClientSubmitID); err == nil {
		return h.replayGoalOp(ctx, op, in.SessionID, digest)
	} else if !errors.Is(err, ErrNotFound) {
		return GoalControlResult{}, goalReadErr(err, "goal operation %s", in.ClientSubmitID)
	}
	unlock := h.locks.lock(in.WorkspaceID, in.SessionID)
	var op GoalOperation
	var st GoalState
	err = h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		s, err := visibleSession(ctx, tx, in.WorkspaceID, in.SessionID)
		if err != nil {
			return err
		}
		if s.ParentID != "" {
			return &Error{Code: CodeUnsupported, Reason: "subagent_session",
				Message: "a sub-agent session follows its parent; set the goal on the parent session"}
		}
		if _, err := tx.GoalOperation(ctx, in.WorkspaceID, in.ClientSubmitID); err == nil {
			return errClaimExists
		} else if !errors.Is(err, ErrNotFound) {
			return err
		}
		cur, err := loadGoal(ctx, tx, in.WorkspaceID, in.SessionID)
		if err != nil {
			return err
		}
		now := h.nowUTC()
		op = GoalOperation{WorkspaceID: in.WorkspaceID, ClientSubmitID: in.ClientSubmitID,
			ID: h.newID("gop"), SessionID: in.SessionID, Action: in.Action, Digest: digest, Spec: spec,
			State: GoalOpAccepted, By: in.By, ByName: in.ByName, CreatedAt: now, UpdatedAt: now}
		held, err := goalHeld(ctx, tx, cur)
		if err != nil {
			return err
		}
		next, fenced, changed, err := applyGoalAction(cur, op, held, now)
		if err != nil {
			return err
		}
		if !changed {
			// Already in the asked state (two people pausing at once):
			// recorded, nothing to do.
			op.State, op.Revision = GoalOpApplied, cur.Revision
			st = cur
			return tx.InsertGoalOperation(ctx, op)
		}
		op.Revision, next.RevisedAtTurn = next.Revision, s.TurnCount
		if err := tx.InsertGoalOperation(ctx, op); err != nil {
			return err
		}
		if fenced != nil {
			f := GoalFence{WorkspaceID: in.WorkspaceID, SessionID: in.SessionID,
				OperationID: fenced.OperationID, Revision: fenced.Revision, ByOperation: op.ID,
				State: GoalFencePending, CreatedAt: now, UpdatedAt: now}
			if err := tx.InsertGoalFence(ctx, f); err != nil && !errors.Is(err, ErrDuplicate) {
				return err
			}
		}
		st = next
		return putGoal(ctx, tx, emit, st)
	})
	unlock()
	if errors.Is(err, errClaimExists) || errors.Is(err, ErrDuplicate) {
		cur, gerr := h.store.GetGoalOperation(ctx, in.WorkspaceID, in.ClientSubmitID)
		if gerr != nil {
			return GoalControlResult{}, goalReadErr(gerr, "goal operation %s", in.ClientSubmitID)
		}
		return h.replayGoalOp(ctx, cur, in.SessionID, digest)
	}
	if err != nil {
		if cur, gerr := h.store.GetGoalOperation(ctx, in.WorkspaceID, in.ClientSubmitID); gerr == nil && cur.ID == op.ID {
			return h.replayGoalOp(ctx, cur, in.SessionID, digest) // only the acknowledgement was lost
		}
		// A corrupt goal record stays as it is (quarantined): a person
		// cannot build on a state nobody can read.
		return GoalControlResult{}, goalReadErr(err, "goal of session %s", in.SessionID)
	}
	// The intent is durable: from here on failures leave the operation
	// accepted for the goal worker, never an error to the caller.
	if op.State == GoalOpAccepted {
		h.finishGoalOp(ctx, op, fenceWait)
		h.wakeGoals()
	}
	return h.goalResult(ctx, in.WorkspaceID, in.ClientSubmitID, st, false)
}

// applyGoalAction computes the next goal state for op. fenced is the goal
// identity the action revokes (nil: none); changed is false when the goal
// already is where the action asks it to be.
func applyGoalAction(cur GoalState, op GoalOperation, held bool, now time.Time) (next GoalState, fenced *Goal, changed bool, err error) {
	next = cur
	g := cur.Goal
	bump := func(ng *Goal) {
		next.Revision = cur.Revision + 1
		next.Seq = cur.Seq + 1
		next.UpdatedAt = now
		if ng != nil {
			ng.Revision, ng.OperationID, ng.UpdatedAt = next.Revision, op.ID, now
		}
		next.Goal = ng
	}
	notLive := func() error {
		return &Error{Code: CodeInvalidInput, Reason: "goal_not_live",
			Message: "the session has no active or paused goal to " + op.Action}
	}
	switch op.Action {
	case GoalActionSet, GoalActionAdopt:
		if g.Live() {
			fenced = g
		}
		// A generation is named by the revision that began it, so it is
		// monotonic across clear and set too.
		ng := &Goal{GoalSpec: *op.Spec, Status: GoalActive, Generation: cur.Revision + 1,
			Source: "user", SetBy: op.By, SetByName: op.ByName, StartedAt: now}
		if op.Action == GoalActionAdopt {
			ng.Source = "provider"
		}
		bump(ng)
		return next, fenced, true, nil
	case GoalActionPause:
		if g == nil || !g.Live() {
			return cur, nil, false, notLive()
		}
		if g.Status == GoalPaused {
			return cur, nil, false, nil
		}
		ng := *g
		ng.Status, ng.PausedBy, ng.PausedByName, ng.ActiveTurnID, ng.EndReason = GoalPaused, op.By, op.ByName, "", ""
		bump(&ng)
		return next, g, true, nil
	case GoalActionResume:
		if g == nil || !g.Live() {
			return cur, nil, false, notLive()
		}
		if g.Status == GoalActive && !held {
			return cur, nil, false, nil
		}
		// Resuming a held goal (restored or imported active) starts a new
		// revision: its own identity is fenced and never arms.
		ng := *g
		ng.Status, ng.PausedBy, ng.PausedByName, ng.ActiveTurnID, ng.EndReason = GoalActive, "", "", "", ""
		bump(&ng)
		return next, nil, true, nil
	case GoalActionClear:
		if g == nil {
			return cur, nil, false, nil
		}
		if g.Live() {
			fenced = g
		}
		bump(nil)
		return next, fenced, true, nil
	}
	return cur, nil, false, Errorf(CodeInvalidInput, "unknown goal action %q", op.Action)
}

// loadGoal reads the session's goal record inside tx; a session without one
// gets an empty record at revision 0.
func loadGoal(ctx context.Context, tx Tx, ws, sid string) (GoalState, error) {
	g, err := tx.Goal(ctx, ws, sid)
	if errors.Is(err, ErrNotFound) {
		return GoalState{WorkspaceID: ws, SessionID: sid}, nil
	}
	return g, err
}

// putGoal writes the goal record and, in the same transaction, the
// goal_state fact that carries it to every replica.
func putGoal(ctx context.Context, tx Tx, emit func(...Fact), g GoalState) error {
	g.Held = false // derived on read, never stored; a written goal is not held
	if err := tx.PutGoal(ctx, g); err != nil {
		return err
	}
	cp := g
	emit(Fact{WorkspaceID: g.WorkspaceID, Kind: FactGoalState, SessionID: g.SessionID, Version: g.Seq, Goal: &cp})
	return nil
}

// replayGoalOp answers a retried ClientSubmitID from its durable operation.
func (h *Host) replayGoalOp(ctx context.Context, op GoalOperation, sessionID, digest string) (GoalControlResult, error) {
	if op.SessionID != sessionID || op.Digest != digest {
		return GoalControlResult{}, &Error{Code: CodeOperationConflict, Reason: "client_submit_id_reused",
			Message: "clientSubmitId was already used for another goal operation"}
	}
	if op.State == GoalOpAccepted {
		h.finishGoalOp(ctx, op, fenceWait) // a retry drives what a crash left unfinished
		h.wakeGoals()
	}
	st, err := h.goalState(ctx, op.WorkspaceID, op.SessionID)
	if err != nil {
		return GoalControlResult{}, err
	}
	return h.goalResult(ctx, op.WorkspaceID, op.ClientSubmitID, st, true)
}

func (h *Host) goalResult(ctx context.Context, ws, csid string, st GoalState, replayed bool) (GoalControlResult, error) {
	op, err := h.store.GetGoalOperation(ctx, ws, csid)
	if err != nil {
		return GoalControlResult{}, goalReadErr(err, "goal operation %s", csid)
	}
	if fresh, err := h.goalState(ctx, ws, op.SessionID); err == nil {
		st = fresh // the effects may have moved it on (an armed turn)
	}
	return GoalControlResult{Goal: st.Goal, State: st, IntentAccepted: true, Operation: op, Replayed: replayed}, nil
}

// GoalOperation returns the goal operation recorded under a
// ClientSubmitID (the seed's FindGoalControlOperationByClientSubmitID), so
// a client that lost the answer can recover it without repeating it.
func (h *Host) GoalOperation(ctx context.Context, ws, clientSubmitID string) (GoalOperation, error) {
	if err := requireIDs(ws, clientSubmitID); err != nil {
		return GoalOperation{}, err
	}
	op, err := h.store.GetGoalOperation(ctx, ws, clientSubmitID)
	if err != nil {
		return GoalOperation{}, goalReadErr(err, "goal operation %s", clientSubmitID)
	}
	return op, nil
}

// GetGoal is a pure canonical read of a session's goal state: it never
// changes anything.
func (h *Host) GetGoal(ctx context.Context, ws, sessionID string) (GoalState, error) {
	if err := requireIDs(ws, sessionID); err != nil {
		return GoalState{}, err
	}
	s, err := h.store.GetSession(ctx, ws, sessionID)
	if err != nil {
		return GoalState{}, storeErr(err, "session %s", sessionID)
	}
	if !visible(s) {
		return GoalState{}, Errorf(CodeNotFound, "session %s not found", sessionID)
	}
	st, err := h.goalState(ctx, ws, sessionID)
	if err != nil || st.Goal == nil || st.Goal.Status != GoalActive {
		return st, err
	}
	if st.Held, err = h.store.GoalFenced(ctx, ws, sessionID, st.Goal.OperationID, st.Goal.Revision); err != nil {
		return GoalState{}, storeErr(err, "goal of session %s", sessionID)
	}
	return st, nil
}

func (h *Host) goalState(ctx context.Context, ws, sid string) (GoalState, error) {
	g, err := h.store.GetGoal(ctx, ws, sid)
	if errors.Is(err, ErrNotFound) {
		return GoalState{WorkspaceID: ws, SessionID: sid}, nil
	}
	if err != nil {
		return GoalState{}, goalReadErr(err, "goal of session %s", sid)
	}
	return g, nil
}

// goalReadErr types a failed goal read: a stored record that does not
// decode is goal_record_corrupt (the scans quarantine it and nothing runs
// from it; retrying cannot help), anything else the usual store error.
func goalReadErr(err error, format string, args ...any) error {
	if errors.Is(err, ErrCorrupt) {
		return &Error{Code: CodeInternal, Reason: ReasonGoalRecordCorrupt, Err: err,
			Message: fmt.Sprintf(format, args...) + " cannot be read: its stored record is corrupt and quarantined"}
	}
	return storeErr(err, format, args...)
}

// createWithGoal creates a session with an initial goal: an empty session
// made idempotent by the ClientSubmitID's create claim, then the goal
// saga under the same id (goal operations are keyed apart from submit
// claims). A retry after a crash between the two finds the session and
// finishes the goal operation; no turn opens until the goal arms.
func (h *Host) createWithGoal(ctx context.Context, in CreateSessionInput) (CreateSessionResult, error) {
	if in.Content != nil {
		return CreateSessionResult{}, Errorf(CodeInvalidInput, "content and goal are mutually exclusive")
	}
	if _, err := normalizeGoalSpec(*in.Goal); err != nil {
		return CreateSessionResult{}, err
	}
	if in.ClientSubmitID == "" {
		in.ClientSubmitID = h.newID("submit")
	} else if err := requireClientID(in.ClientSubmitID); err != nil {
		return CreateSessionResult{}, err
	}
	spec := in.Goal
	in.Goal = nil
	r, err := h.CreateSession(ctx, in)
	if err != nil {
		return CreateSessionResult{}, err
	}
	gr, err := h.GoalControl(ctx, GoalControlInput{WorkspaceID: in.WorkspaceID, SessionID: r.Session.ID,
		ClientSubmitID: in.ClientSubmitID, Action: GoalActionSet, Goal: spec, By: in.CreatedBy, ByName: in.CreatedByName})
	if err != nil {
		return CreateSessionResult{}, err
	}
	r.Goal = &gr
	return r, nil
}
