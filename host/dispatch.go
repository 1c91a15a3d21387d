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
func (h *Host) dispatch(ctx context.Context, s Session, t Turn, c SubmitClaim, provisional bool) (Turn, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), acceptanceTimeout)
	defer cancel()
	ref := TurnRef{WorkspaceID: t.WorkspaceID, SessionID: t.SessionID, TurnID: t.ID}
	if _, mine, err := h.ownSession(ctx, s.WorkspaceID, s.ID, t.ID); err != nil || !mine {
		if err == nil {
			err = &Error{Code: CodeUnavailable, Reason: "stale_owner", Message: "another replica owns this session"}
		}
		return h.failBeforeDispatch(ctx, ref, provisional, err)
	}

	start, err := h.runtime.Start(ctx, StartRequest{
		WorkspaceID: s.WorkspaceID, SessionID: s.ID,
		ProviderSessionID: s.ProviderSessionID, Settings: s.Settings,
	})
	if err != nil {
		// The provider never saw the prompt: nothing is ambiguous.
		return h.failBeforeDispatch(ctx, ref, provisional, err)
	}
	err = h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		if err := h.checkOwner(ctx, tx, ref.WorkspaceID, ref.SessionID); err != nil {
			return err
		}
		cur, err := tx.Turn(ctx, ref.WorkspaceID, ref.SessionID, ref.TurnID)
		if err != nil {
			return err
		}
		if cur.Settled() { // canceled while queued
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
	if errors.Is(err, errSettledBeforeDispatch) {
		return h.store.GetTurn(ctx, ref.WorkspaceID, ref.SessionID, ref.TurnID)
	}
	if err != nil {
		return h.failBeforeDispatch(ctx, ref, provisional, err)
	}

	sink := newTurnSink(h, ref, false)
	sink.phase = PhaseDispatched // written just above
	err = h.runtime.Dispatch(ctx, DispatchRequest{
		Ref: ref, ProviderSessionID: start.ProviderSessionID, ClientSubmitID: c.ClientSubmitID,
		Content: c.Content, OccurredAt: c.CreatedAt,
	}, sink)
	var pe *ProviderError
	switch {
	case err == nil:
		return h.store.GetTurn(ctx, ref.WorkspaceID, ref.SessionID, ref.TurnID)
	case errors.As(err, &pe):
		// An explicit rejection: the failed Turn and prompt stay as history
		// and a replay of the same id returns them without dispatch.
		t, serr := h.settle(ctx, ref, Terminal{Outcome: OutcomeFailed, Reason: ReasonProviderRejected}, ClaimRejected)
		if serr != nil {
			return Turn{}, wrap(CodeOutcomeUnknown, serr, "the provider rejected the prompt but the rejection could not be recorded")
		}
		if provisional {
			_ = h.runtime.Close(ctx, ref.WorkspaceID, ref.SessionID)
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
			h.log.Warn("could not settle a turn with unknown delivery; recovery will", "turn", ref.TurnID, "err", serr)
		}
		return Turn{}, &Error{Code: CodeOutcomeUnknown, Reason: reason, Err: err,
			Message: "the prompt may or may not have reached the agent; it will not be resent"}
	}
}

var errSettledBeforeDispatch = errors.New("turn settled before dispatch")

// failBeforeDispatch handles a failure where the provider never received the
// prompt. A provisional session is compensated away entirely; otherwise the
// Turn fails and its claim is rejected.
func (h *Host) failBeforeDispatch(ctx context.Context, ref TurnRef, provisional bool, cause error) (Turn, error) {
	code := CodeOf(cause)
	if code != CodeUnavailable {
		code = CodeUnavailable
	}
	if provisional {
		err := h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
			// A deleted root wakes its whole tree (empty root turn).
			emit(Fact{WorkspaceID: ref.WorkspaceID, Kind: FactInteractionTreeDirty, SessionID: ref.SessionID})
			return tx.DeleteProvisionalSession(ctx, ref.WorkspaceID, ref.SessionID)
		})
		if err != nil {
			h.log.Warn("could not roll back a provisional session; recovery will settle it", "session", ref.SessionID, "err", err)
		}
		return Turn{}, wrap(code, cause, "the agent could not be started; nothing was created")
	}
	if _, err := h.settleRetrying(ctx, ref, Terminal{Outcome: OutcomeFailed, Reason: "runtime_unavailable"}, ClaimRejected); err != nil {
		h.log.Warn("could not settle an undispatched turn", "turn", ref.TurnID, "err", err)
	}
	return Turn{}, wrap(code, cause, "the agent could not be started; the prompt was not sent")
}

func turnFact(t Turn) Fact {
	return Fact{WorkspaceID: t.WorkspaceID, Kind: FactSessionChanged, SessionID: t.SessionID, TurnID: t.ID}
}
