package host

import (
	"context"
	"time"
)

// MaxCancelWait bounds how long CancelTurn waits for settlement.
const MaxCancelWait = 30 * time.Second

// CancelTurn records a durable cancel intent for one exact Turn, asks the
// provider to stop it, and optionally waits for canonical settlement. The
// three facts are reported separately; none is inferred from another.
func (h *Host) CancelTurn(ctx context.Context, in CancelInput) (CancelResult, error) {
	if err := requireIDs(in.WorkspaceID, in.SessionID, in.TurnID); err != nil {
		return CancelResult{}, err
	}
	if in.Wait < 0 || in.Wait > MaxCancelWait {
		in.Wait = MaxCancelWait
	}
	ref := TurnRef{WorkspaceID: in.WorkspaceID, SessionID: in.SessionID, TurnID: in.TurnID}
	// Only the owner's runtime can stop the Turn: forward to it.
	if owner, mine, err := h.ownSession(ctx, in.WorkspaceID, in.SessionID, in.TurnID); err != nil {
		return CancelResult{}, err
	} else if !mine {
		return h.forwardCancelTurn(ctx, owner, in)
	}
	var t Turn
	var settledNow bool
	err := h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		s, err := visibleSession(ctx, tx, in.WorkspaceID, in.SessionID)
		if err != nil {
			return err
		}
		t, err = tx.Turn(ctx, in.WorkspaceID, in.SessionID, in.TurnID)
		if err != nil {
			return err
		}
		if t.Settled() || t.CancelRequested {
			return nil // idempotent: the first intent (or the terminal) stands
		}
		t.CancelRequested, t.UpdatedAt = true, h.nowUTC()
		t.CanceledBy, t.CanceledByName, t.CancelReason = in.By, in.ByName, in.Reason
		// ACP: cancelling a prompt answers its pending permission requests
		// "cancelled"; the canonical interactions say so at once.
		if _, err := endInteractions(ctx, tx, t, InteractionCanceled, ResolutionTurnCanceled, t.UpdatedAt); err != nil {
			return err
		}
		if err := emitTree(ctx, tx, emit, s); err != nil {
			return err
		}
		if t.Phase == PhaseQueued {
			// Not dispatched yet: the provider never saw it, so cancel is exact.
			now := t.UpdatedAt
			t.Phase, t.Outcome, t.SettledAt, t.FailureReason = PhaseSettled, OutcomeCanceled, &now, in.Reason
			if s.ActiveTurnID == t.ID {
				s.ActiveTurnID, s.UpdatedAt = "", now
				if err := h.handoffIn(ctx, tx, emit, &s, t); err != nil {
					return err
				}
				if err := tx.UpdateSession(ctx, s); err != nil {
					return err
				}
			}
			settledNow = true
		}
		emit(turnFact(t))
		return tx.UpdateTurn(ctx, t)
	})
	h.takeSuccessor(in.TurnID, err == nil && settledNow)
	if err != nil {
		return CancelResult{}, storeErr(err, "turn %s", in.TurnID)
	}
	if settledNow {
		h.settled.notify(t.ID)
		h.wakeOps()
	}
	res := CancelResult{IntentAccepted: t.CancelRequested, Settled: t.Settled(), Turn: t}
	if t.Settled() {
		return res, nil
	}
	if h.work.isDriving(t.ID) {
		// Unconfirmed (or failed) deliveries are retried by the reconciler
		// until the runtime confirms or the Turn settles.
		res.ProviderConfirmed = h.deliverCancel(context.WithoutCancel(ctx), ref)
	} else {
		// No dispatch of this process drives the Turn: its runtime target
		// is gone or its terminal write failed. Settle it now.
		h.reconcileTurn(context.WithoutCancel(ctx), t)
	}
	if t, err = h.waitSettled(ctx, ref, in.Wait); err == nil {
		res.Turn, res.Settled = t, t.Settled()
	}
	return res, nil
}
