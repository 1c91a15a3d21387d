package host

import (
	"context"
	"errors"
	"time"
)

// acceptanceTimeout bounds how long a submit waits for the provider to
// accept; past it the delivery outcome is unknown.
const acceptanceTimeout = 60 * time.Second

// dispatch starts the runtime if needed, records the dispatch admission and
// crosses the provider acceptance barrier. It runs on a context detached
// from the caller so a dropped client cannot abandon a half-made decision.
//
// The caller holds the Turn's drive claim (h.work.drive); dispatch hands it
// to the Turn's sink once the runtime took the prompt, and releases it on
// every other path.
//
// One rule for failures before the provider saw the prompt: the answer is
// unavailable (retryable) and the claim stays prepared. A Turn of a visible
// session goes back to queued, where the retry of the same ClientSubmitID
// or the reconciler dispatches it exactly once; a provisional session is
// rolled back whole, so the retry creates it afresh.
func (h *Host) dispatch(ctx context.Context, s Session, t Turn, c SubmitClaim, provisional bool) (Turn, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), acceptanceTimeout)
	defer cancel()
	ref := TurnRef{WorkspaceID: t.WorkspaceID, SessionID: t.SessionID, TurnID: t.ID}
	handed := false
	defer func() {
		if !handed {
			h.work.release(ref.TurnID)
		}
	}()
	psid := s.ProviderSessionID
	// A Turn admitted already dispatched (send.go) was admitted to the
	// live provider session of this replica's lease, checked just before:
	// no Start, no second guard commit. Every other Turn starts here.
	if t.Phase != PhaseDispatched {
		started, settled, done, err := h.startDispatch(ctx, ref, s, provisional)
		if done {
			return settled, err
		}
		psid = started
	}

	sink := newTurnSink(h, ref, false)
	sink.phase = PhaseDispatched // written by the admission or markDispatched
	err := h.runtime.Dispatch(ctx, DispatchRequest{
		Ref: ref, ProviderSessionID: psid, ClientSubmitID: c.ClientSubmitID,
		Content: c.Content, OccurredAt: c.CreatedAt,
	}, sink)
	var pe *ProviderError
	var le *LocalError
	switch {
	case err == nil:
		handed = true // the sink releases the drive claim at the terminal
		if t, ok := sink.acceptedTurn(); ok {
			return t, nil // as the acceptance committed it: no read
		}
		return h.store.GetTurn(ctx, ref.WorkspaceID, ref.SessionID, ref.TurnID)
	case errors.As(err, &le):
		// The runtime refused before writing anything: not a provider
		// answer, so nothing is settled and the claim stays retryable.
		return h.failBeforeDispatch(ctx, ref, provisional, err, le.Code)
	case errors.As(err, &pe):
		// An explicit rejection: the failed Turn and prompt stay as history
		// and a replay of the same id returns them without dispatch.
		term := Terminal{Outcome: OutcomeFailed, Reason: ReasonProviderRejected}
		t, serr := h.settle(ctx, ref, term, ClaimRejected)
		if serr != nil {
			h.work.pend(ref.TurnID, term, ClaimRejected)
			return Turn{}, wrap(CodeOutcomeUnknown, serr, "the provider rejected the prompt but the rejection is not recorded yet")
		}
		return t, nil
	default:
		// Delivery unknown: keep the prepared claim, never redispatch, and
		// settle without guessing an outcome.
		reason := ReasonExecutionStatusUnknown
		if sink.acceptFailed {
			reason = ReasonDeliveryUnknown
		}
		if _, serr := h.settleRetrying(ctx, ref, Terminal{Outcome: OutcomeFailed, Reason: ReasonExecutionStatusUnknown}, ""); serr != nil {
			h.log.Warn("could not settle a turn with unknown delivery; the reconciler will", "turn", ref.TurnID, "err", serr)
		}
		return Turn{}, &Error{Code: CodeOutcomeUnknown, Reason: reason, Err: err,
			Message: "the prompt may or may not have reached the agent; it will not be resent"}
	}
}

// startDispatch checks the lease, starts the runtime and commits queued
// → dispatched, returning the provider session to send to. done reports
// that the Turn will not be sent, with turn as it stands (settled while
// queued) or err.
func (h *Host) startDispatch(ctx context.Context, ref TurnRef, s Session, provisional bool) (psid string, turn Turn, done bool, err error) {
	if _, mine, err := h.ownSession(ctx, s.WorkspaceID, s.ID, ref.TurnID); err != nil || !mine {
		if err == nil {
			err = &Error{Code: CodeUnavailable, Reason: "stale_owner", Message: "another replica owns this session; it sends the prompt"}
		}
		// Not ours to roll back or requeue: the owner's reconciler drives it.
		return "", Turn{}, true, err
	}
	if s.ContextLost {
		return "", Turn{}, true, errContextLost
	}
	start, err := h.runtime.Start(ctx, StartRequest{
		WorkspaceID: s.WorkspaceID, SessionID: s.ID,
		ProviderSessionID: s.ProviderSessionID, Settings: s.Settings,
	})
	if errors.Is(err, ErrContextLost) && !provisional {
		return "", Turn{}, true, h.markContextLost(ctx, ref, err)
	}
	if err != nil {
		turn, err = h.failBeforeDispatch(ctx, ref, provisional, err, ReasonRuntimeUnavailable)
		return "", turn, true, err
	}
	if err := h.markDispatched(ctx, ref, s, start); errors.Is(err, errSettledBeforeDispatch) {
		turn, err = h.store.GetTurn(ctx, ref.WorkspaceID, ref.SessionID, ref.TurnID)
		return "", turn, true, err
	} else if err != nil {
		turn, err = h.failBeforeDispatch(ctx, ref, provisional, err, ReasonStoreUnavailable)
		return "", turn, true, err
	}
	return start.ProviderSessionID, Turn{}, false, nil
}

var errSettledBeforeDispatch = errors.New("turn settled before dispatch")

// markDispatched commits queued → dispatched (and a new provider session
// id). It is the exactly-once guard of a dispatch: a Turn that is no longer
// queued is never sent again. A lost acknowledgement is resolved by reading
// the Turn back: this dispatch holds the drive claim and the owner fence,
// so a dispatched Turn can only be its own commit.
func (h *Host) markDispatched(ctx context.Context, ref TurnRef, s Session, start StartResult) error {
	err := h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		cur, err := h.fencedTurn(ctx, tx, ref)
		if err != nil {
			return err
		}
		if cur.Phase != PhaseQueued { // canceled while queued, or already sent
			return errSettledBeforeDispatch
		}
		if start.ProviderSessionID != s.ProviderSessionID {
			sess, err := tx.Session(ctx, ref.WorkspaceID, ref.SessionID)
			if err != nil {
				return err
			}
			sess.ProviderSessionID = start.ProviderSessionID
			if err := tx.UpdateSession(ctx, sess); err != nil {
				return err
			}
		}
		cur.Phase, cur.UpdatedAt = PhaseDispatched, h.nowUTC()
		emit(turnFact(cur))
		return tx.UpdateTurn(ctx, cur)
	})
	if err == nil || !errors.Is(err, ErrUnavailable) {
		return err
	}
	if t, rerr := h.store.GetTurn(ctx, ref.WorkspaceID, ref.SessionID, ref.TurnID); rerr == nil && t.Phase == PhaseDispatched {
		return nil
	}
	return err
}

// failBeforeDispatch handles a failure where the provider never received the
// prompt (see dispatch for the rule). reason names the local condition.
func (h *Host) failBeforeDispatch(ctx context.Context, ref TurnRef, provisional bool, cause error, reason string) (Turn, error) {
	if provisional {
		err := h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
			// A deleted root wakes its whole tree (empty root turn).
			emit(Fact{WorkspaceID: ref.WorkspaceID, Kind: FactInteractionTreeDirty, SessionID: ref.SessionID})
			return tx.DeleteProvisionalSession(ctx, ref.WorkspaceID, ref.SessionID)
		})
		if err != nil {
			h.log.Warn("could not roll back a provisional session; the reconciler retries it", "session", ref.SessionID, "err", err)
		} else if cerr := h.runtime.Destroy(ctx, ref.WorkspaceID, ref.SessionID); cerr != nil {
			// The binding may hold a provider session for a session that
			// no longer exists.
			h.log.Warn("could not close the runtime binding of a rolled-back session", "session", ref.SessionID, "err", cerr)
		}
		return Turn{}, &Error{Code: CodeUnavailable, Reason: reason, Err: cause,
			Message: "the agent could not take the prompt; nothing was created, retry"}
	}
	if err := h.requeue(ctx, ref); err != nil {
		h.log.Warn("could not put an unsent turn back in the queue; the reconciler settles it", "turn", ref.TurnID, "err", err)
	}
	return Turn{}, &Error{Code: CodeUnavailable, Reason: reason, Err: cause,
		Message: "the agent could not take the prompt; it was not sent and stays queued (retrying the same clientSubmitId is safe)"}
}

// requeue moves a Turn this dispatch marked dispatched back to queued. It
// is only ever called before the runtime was asked to send the prompt.
func (h *Host) requeue(ctx context.Context, ref TurnRef) error {
	return h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		cur, err := h.fencedTurn(ctx, tx, ref)
		if err != nil {
			return err
		}
		if cur.Phase != PhaseDispatched {
			return nil
		}
		cur.Phase, cur.UpdatedAt = PhaseQueued, h.nowUTC()
		emit(turnFact(cur))
		return tx.UpdateTurn(ctx, cur)
	})
}

// turnFact says t changed. Its transaction's commit attaches the Turn (and
// the session) as written, so hubs apply it without a reread (written.go):
// the transactions that emit it write nothing else a watcher sees but
// messages (typed deltas), the interaction tree and the queue (their own
// facts).
func turnFact(t Turn) Fact {
	return Fact{WorkspaceID: t.WorkspaceID, Kind: FactSessionChanged, SessionID: t.SessionID, TurnID: t.ID, typed: true}
}
