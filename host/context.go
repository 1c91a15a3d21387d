package host

import "context"

// Resume policy. When the agent cannot load a session's provider session
// (its history is gone there), the Host never starts over silently: the
// session is marked ContextLost, the Turn stays queued with its claim
// prepared, and nothing is sent until a member chooses ContinueFresh. A
// transport release (lease lost, shutdown) never destroys the provider
// session (Runtime.Release), so the next owner can load it.

// ReasonContextLost is the reason of the not_dispatched answer while a
// session's agent context is lost.
const ReasonContextLost = "context_lost"

var errContextLost = &Error{Code: CodeNotDispatched, Reason: ReasonContextLost,
	Message: "the agent could not load this session's history; nothing was sent. Continue in a fresh agent session (session.continueFresh) to send it"}

// markContextLost records that the session's provider session could not
// be loaded. The Turn stays queued.
func (h *Host) markContextLost(ctx context.Context, ref TurnRef, cause error) error {
	err := h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		s, err := tx.Session(ctx, ref.WorkspaceID, ref.SessionID)
		if err != nil || s.ContextLost {
			return err
		}
		s.ContextLost, s.UpdatedAt = true, h.nowUTC()
		emit(Fact{WorkspaceID: s.WorkspaceID, Kind: FactSessionChanged, SessionID: s.ID})
		return tx.UpdateSession(ctx, s)
	})
	if err != nil {
		return storeErr(err, "session %s", ref.SessionID)
	}
	h.log.Warn("the agent could not load the session; waiting for a member to continue fresh", "session", ref.SessionID, "err", cause)
	return errContextLost
}

// ContinueFreshInput names the session to continue in a fresh agent
// session.
type ContinueFreshInput struct {
	WorkspaceID string
	SessionID   string
}

// ContinueFresh is the explicit choice to go on without the lost agent
// context: the session forgets its provider session, and its queued Turn
// (if any) is dispatched into a fresh one. The transcript stays; the agent
// will not know it. On a session whose context is not lost it changes
// nothing.
func (h *Host) ContinueFresh(ctx context.Context, in ContinueFreshInput) (Session, error) {
	if err := requireIDs(in.WorkspaceID, in.SessionID); err != nil {
		return Session{}, err
	}
	var out Session
	err := h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		s, err := visibleSession(ctx, tx, in.WorkspaceID, in.SessionID)
		if err != nil {
			return err
		}
		out = s
		if !s.ContextLost {
			return nil
		}
		s.ContextLost, s.ProviderSessionID, s.UpdatedAt = false, "", h.nowUTC()
		out = s
		emit(Fact{WorkspaceID: s.WorkspaceID, Kind: FactSessionChanged, SessionID: s.ID})
		return tx.UpdateSession(ctx, s)
	})
	if err != nil {
		return Session{}, storeErr(err, "session %s", in.SessionID)
	}
	if out.ActiveTurnID != "" {
		t, err := h.store.GetTurn(ctx, out.WorkspaceID, out.ID, out.ActiveTurnID)
		if err == nil && t.Phase == PhaseQueued {
			// The reconciler would send it within a second; send it now.
			if _, rerr := h.redrive(ctx, t); rerr != nil {
				h.log.Warn("continue fresh: dispatch failed; the reconciler retries", "turn", t.ID, "err", rerr)
			}
		}
	}
	return out, nil
}
