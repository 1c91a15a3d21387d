package host

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Goal fences: a goal change revokes the turns of the identity it replaced.
// An accepted operation is applied once its fences are done; startup
// recovery finishes what a crash left pending.

// finishGoalOp completes an accepted operation: the fences it wrote are
// processed (a live turn of the revoked identity is cancelled) before the
// operation is marked applied. A failure leaves it accepted for the worker.
func (h *Host) finishGoalOp(ctx context.Context, op GoalOperation, wait time.Duration) {
	ctx = context.WithoutCancel(ctx)
	fences, err := h.store.PendingGoalFences(ctx)
	if err != nil {
		h.log.Warn("goal: list fences", "err", err)
		return
	}
	for _, f := range fences {
		if f.WorkspaceID == op.WorkspaceID && f.SessionID == op.SessionID {
			if !h.processFence(ctx, f, false, wait) {
				return // still pending: the worker retries
			}
		}
	}
	err = h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		cur, err := tx.GoalOperation(ctx, op.WorkspaceID, op.ClientSubmitID)
		if err != nil || cur.State != GoalOpAccepted {
			return err
		}
		cur.State, cur.UpdatedAt = GoalOpApplied, h.nowUTC()
		return tx.UpdateGoalOperation(ctx, cur)
	})
	if err != nil {
		h.log.Warn("goal: mark operation applied", "operation", op.ID, "err", err)
	}
}

// processFence revokes the work of one fenced goal identity: a live turn
// whose provenance matches it exactly is cancelled (never any other turn),
// and the fence is done once no such turn is unsettled. At startup
// (recovering) no runtime drives anything yet, so a matching unsettled
// turn is settled interrupted locally instead of calling the provider. It
// reports whether the fence is done. wait bounds how long the first
// cancel waits for the turn's terminal.
func (h *Host) processFence(ctx context.Context, f GoalFence, recovering bool, wait time.Duration) bool {
	s, err := h.store.GetSession(ctx, f.WorkspaceID, f.SessionID)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return false
	}
	if err == nil && s.ActiveTurnID != "" {
		t, err := h.store.GetTurn(ctx, f.WorkspaceID, f.SessionID, s.ActiveTurnID)
		if err != nil {
			return false
		}
		if fencedBy(t, f) && !t.Settled() {
			ref := TurnRef{WorkspaceID: t.WorkspaceID, SessionID: t.SessionID, TurnID: t.ID}
			if recovering {
				if _, err := h.settle(ctx, ref, Terminal{Outcome: OutcomeInterrupted, Reason: "goal_fenced"}, ""); err != nil {
					return false
				}
			} else if !t.CancelRequested {
				res, err := h.CancelTurn(ctx, CancelInput{WorkspaceID: t.WorkspaceID, SessionID: t.SessionID,
					TurnID: t.ID, Wait: wait, By: "ensemble:goal", ByName: h.fenceLabel(ctx, f)})
				if err != nil || !res.Settled {
					return false // the fence stays pending until the turn is terminal
				}
			} else {
				// The cancel intent is durable and the reconciler redelivers
				// it; the fence waits for the terminal.
				return false
			}
		}
	}
	err = h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		f.State, f.UpdatedAt = GoalFenceDone, h.nowUTC()
		return tx.UpdateGoalFence(ctx, f)
	})
	return err == nil
}

// fenceLabel names who revoked a goal turn, for "Stopped by …": the
// person whose goal change wrote the fence, when the goal still shows it.
func (h *Host) fenceLabel(ctx context.Context, f GoalFence) string {
	st, err := h.goalState(ctx, f.WorkspaceID, f.SessionID)
	switch g := st.Goal; {
	case err != nil:
	case g == nil:
		return "a goal change (goal cleared)"
	case g.OperationID == f.ByOperation && g.Status == GoalPaused && g.PausedByName != "":
		return g.PausedByName + " (goal paused)"
	case g.OperationID == f.ByOperation && g.SetByName != "":
		return g.SetByName + " (goal replaced)"
	}
	return "a goal change"
}

func fencedBy(t Turn, f GoalFence) bool {
	return t.Goal != nil && t.Goal.OperationID == f.OperationID && t.Goal.Revision == f.Revision
}

// quarantineGoalRecords sets aside goal records a scan could not decode, so
// no later scan acts on them, and reports each in the log. Only a failure
// to persist the quarantine is an error.
func (h *Host) quarantineGoalRecords(ctx context.Context, bad []Quarantined) ([]Quarantined, error) {
	done := make([]Quarantined, 0, len(bad))
	for _, q := range bad {
		if q.At.IsZero() {
			q.At = h.nowUTC()
		}
		if err := h.store.Quarantine(ctx, q); err != nil {
			return done, fmt.Errorf("quarantine %s %s: %w", q.Kind, q.Key, err)
		}
		h.log.Error("goal record quarantined: it does not decode, nothing runs from it",
			"kind", q.Kind, "key", q.Key, "reason", q.Reason)
		done = append(done, q)
	}
	return done, nil
}

// recoverGoals is the goal step of startup recovery, after runtime
// operations and before stale turns: every pending fence first (a
// matching unsettled turn is settled interrupted locally; no provider is
// resumed), then the accepted goal operations. Goal records and
// operations that do not decode are quarantined and returned for the
// report; only a failure to persist that fails recovery.
func (h *Host) recoverGoals(ctx context.Context) ([]Quarantined, error) {
	fences, err := h.store.PendingGoalFences(ctx)
	if err != nil {
		return nil, fmt.Errorf("recovery: goal fences: %w", err)
	}
	for _, f := range fences {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if _, mine, err := h.ownSession(ctx, f.WorkspaceID, f.SessionID, ""); err != nil || !mine {
			continue // a live replica owns it and processes its fences
		}
		if !h.processFence(ctx, f, true, 0) {
			h.log.Warn("recovery: a goal fence stays pending; the goal worker retries", "session", f.SessionID, "operation", f.OperationID)
		}
	}
	ops, badOps, err := h.store.PendingGoalOperations(ctx)
	if err != nil {
		return nil, fmt.Errorf("recovery: goal operations: %w", err)
	}
	quarantined, err := h.quarantineGoalRecords(ctx, badOps)
	if err != nil {
		return quarantined, fmt.Errorf("recovery: %w", err)
	}
	for _, op := range ops {
		if _, mine, err := h.ownSession(ctx, op.WorkspaceID, op.SessionID, ""); err == nil && mine {
			h.finishGoalOp(ctx, op, 0)
		}
	}
	// The live goals are scanned here only to quarantine (and report) the
	// undecodable ones before the worker starts; the worker arms the rest.
	_, badGoals, err := h.store.LiveGoals(ctx)
	if err != nil {
		return quarantined, fmt.Errorf("recovery: live goals: %w", err)
	}
	q, err := h.quarantineGoalRecords(ctx, badGoals)
	quarantined = append(quarantined, q...)
	if err != nil {
		return quarantined, fmt.Errorf("recovery: %w", err)
	}
	return quarantined, nil
}
