package host

import (
	"context"
	"errors"
)

// errClaimExists signals that a concurrent request claimed the same
// ClientSubmitID first; the caller answers from that claim.
var errClaimExists = errors.New("submit claim exists")

// SendInput submits one user message. The ClientSubmitID makes it
// idempotent: the same id (on any replica, across restarts) returns the same
// Turn and dispatches to the provider at most once.
// Ids in ReservedIDPrefixes are refused: that space belongs to the Host.
func (h *Host) SendInput(ctx context.Context, in SendInput) (SendResult, error) {
	if err := requireClientID(in.ClientSubmitID); err != nil {
		return SendResult{}, err
	}
	return h.sendInput(ctx, in)
}

// sendInput is SendInput for any ClientSubmitID, including the Host's own
// reserved ones.
func (h *Host) sendInput(ctx context.Context, in SendInput) (SendResult, error) {
	if err := requireIDs(in.WorkspaceID, in.SessionID); err != nil {
		return SendResult{}, err
	}
	if err := requireIDs(in.ClientSubmitID); err != nil {
		return SendResult{}, Errorf(CodeInvalidInput, "clientSubmitId: %s", err.(*Error).Message)
	}
	content, err := in.Content.Normalize()
	if err != nil {
		return SendResult{}, err
	}
	switch in.Placement {
	case "", PlacementNextTurn, PlacementCurrentTurn:
	default:
		return SendResult{}, Errorf(CodeInvalidInput, "placement must be next_turn or current_turn")
	}

	unlock := h.locks.lock(in.WorkspaceID, in.SessionID)
	// The replica that owns the session's runtime runs the submission; a
	// dead owner's session is taken over (and recovered) first. A retry
	// is answered from its claim wherever it lands; on the owner the
	// admission below finds the claim itself, so only the other paths
	// read it first (one round trip less per submit).
	if owner, mine, err := h.ownSession(ctx, in.WorkspaceID, in.SessionID, ""); err != nil || !mine {
		unlock()
		if r, ok, cerr := h.replayClaimed(ctx, in, content); ok || cerr != nil {
			return r, cerr
		}
		if err != nil {
			return SendResult{}, err
		}
		return h.forwardSend(ctx, owner, in)
	}

	// A session whose provider session is live here needs no Start: its
	// Turn is admitted already dispatched, one commit instead of two.
	livePSID, _ := h.runtime.Live(in.WorkspaceID, in.SessionID)
	// The drive claim is taken before the admission commits, so the
	// reconciler never dispatches a Turn this call is about to send.
	turnID := h.newID("turn")
	h.work.drive(turnID)
	var sess Session
	var turn Turn
	var claim SubmitClaim
	var entry QueueEntry
	err = h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		entry = QueueEntry{}
		s, err := visibleSession(ctx, tx, in.WorkspaceID, in.SessionID)
		if err != nil {
			return err
		}
		if s.ParentID != "" {
			return &Error{Code: CodeUnsupported, Reason: "subagent_session",
				Message: "a sub-agent session is driven by its parent session's agent; prompt the parent session"}
		}
		// A retried ClientSubmitID is answered from its claim (replay). On
		// the idle path the claim's insert finds it (ErrDuplicate, same
		// answer), so only the paths that can refuse before it read first.
		if s.ActiveTurnID != "" || in.Placement == PlacementCurrentTurn && in.TurnID != "" {
			if _, err := tx.Claim(ctx, in.WorkspaceID, in.ClientSubmitID); err == nil {
				return errClaimExists
			} else if !errors.Is(err, ErrNotFound) {
				return err
			}
		}
		if in.Placement == PlacementCurrentTurn && in.TurnID != "" && s.ActiveTurnID != in.TurnID {
			return &Error{Code: CodeNotDispatched, Reason: "turn_mismatch",
				Message: "the target turn is not the session's active turn; nothing was sent"}
		}
		if s.ActiveTurnID != "" {
			if in.Placement == "" {
				return &Error{Code: CodeSessionBusy, Reason: "turn_active",
					Message: "a turn is running in this session; wait for it, cancel it, or submit with a placement to queue"}
			}
			// A busy session queues it: steering or follow-up (queue.go).
			entry, err = h.enqueueIn(ctx, tx, emit, s, in, content)
			return err
		}
		phase := PhaseQueued
		if livePSID != "" && livePSID == s.ProviderSessionID && !s.ContextLost {
			phase = PhaseDispatched
		}
		sess, turn, claim, err = h.admit(ctx, tx, emit, s, turnID, in.ClientSubmitID, content, content.Digest(), in.SubmittedBy, in.SubmittedByName, phase)
		return err
	})
	unlock()
	if err != nil && h.admitted(ctx, err, in.WorkspaceID, in.ClientSubmitID, turnID) {
		err = nil // the commit landed; only its acknowledgement was lost
	}
	if err != nil {
		if errors.Is(err, ErrUnavailable) && turn.ID == turnID && turn.Phase == PhaseDispatched {
			// Admitted or not, it was not sent: if the admission landed,
			// a retry (or the reconciler) sends it instead of finding a
			// dispatched Turn no dispatch drives. Marked before the
			// drive claim goes, so no reconciler pass sees neither.
			h.work.markUnsent(turnID)
		}
		h.work.release(turnID)
	}
	if errors.Is(err, errClaimExists) || errors.Is(err, ErrDuplicate) {
		c, cerr := h.store.GetClaim(ctx, in.WorkspaceID, in.ClientSubmitID)
		if cerr != nil {
			return SendResult{}, storeErr(cerr, "submit claim")
		}
		return h.replay(ctx, c, in, content)
	}
	if err != nil {
		// A refusal before the claim's insert (the session deleted or
		// not promptable since) still answers a retry from its claim, and
		// so is an admission whose acknowledgement was lost (a queue
		// admission from its claim and entry, like any retry).
		if r, ok, cerr := h.replayClaimed(ctx, in, content); ok || cerr != nil {
			return r, cerr
		}
		return SendResult{}, storeErr(err, "submit")
	}
	if entry.ID != "" {
		h.work.release(turnID) // no turn was admitted
		return h.queued(ctx, entry, false)
	}
	t, err := h.dispatch(ctx, sess, turn, claim, false)
	if err != nil {
		return SendResult{}, err
	}
	return SendResult{Disposition: DispositionTurnStarted, Turn: &t}, nil
}

// admit writes the durable admission of one submission inside tx: the
// prepared claim, the Turn, the user message and the session's active
// turn. The claim's creation time is the message's occurrence; digest is
// what a retry of the same request must match. The Turn is born in phase:
// queued, or dispatched when the caller sends it to a live provider
// session without a Start (the admission is then also the dispatch
// guard; dispatch.go).
func (h *Host) admit(ctx context.Context, tx Tx, emit func(...Fact), s Session, turnID, clientSubmitID string, content MessageContent, digest, by, byName string, phase TurnPhase) (Session, Turn, SubmitClaim, error) {
	now := h.nowUTC()
	agent := h.runtime.Describe()
	turn := Turn{
		WorkspaceID: s.WorkspaceID, SessionID: s.ID, ID: turnID,
		Seq: s.TurnCount + 1, Origin: "user", Phase: phase,
		ClientSubmitID: clientSubmitID, SubmittedBy: by, CreatedAt: now, UpdatedAt: now,
		TurnLabels: TurnLabels{SubmittedByName: byName, Agent: &agent},
	}
	claim := SubmitClaim{
		WorkspaceID: s.WorkspaceID, ClientSubmitID: clientSubmitID, SessionID: s.ID,
		TurnID: turn.ID, Digest: digest, Content: content, State: ClaimPrepared,
		CreatedAt: now, UpdatedAt: now,
	}
	// Neither insert waits for its answer on a store that can refuse the
	// transaction later (pg: both go with COMMIT): a duplicate fails the
	// admission, and SendInput answers from the claim.
	if err := tx.InsertTurn(ctx, turn); err != nil {
		return s, turn, claim, err
	}
	if err := tx.AdmitClaim(ctx, claim); err != nil {
		return s, turn, claim, err
	}
	s.TurnCount = turn.Seq
	prompt, err := putMessages(ctx, tx, &s, now, Message{
		WorkspaceID: s.WorkspaceID, SessionID: s.ID, ID: turn.ID + ".prompt", TurnID: turn.ID,
		Role: RoleUser, Kind: KindText, Content: content, Author: by, AuthorName: byName,
		CreatedAt: claim.CreatedAt, UpdatedAt: now,
	})
	if err != nil {
		return s, turn, claim, err
	}
	s.ActiveTurnID = turn.ID
	applyDerivedTitle(&s, content)
	s.UpdatedAt = now
	if err := tx.UpdateSession(ctx, s); err != nil {
		return s, turn, claim, err
	}
	// The prompt first: a watcher applying the typed Turn has its prompt.
	emit(prompt, turnFact(turn))
	return s, turn, claim, emitTreeAt(ctx, tx, emit, s, turn)
}

// replayClaimed answers a submission from its durable claim when there is
// one (ok); a failed read is returned as the error.
func (h *Host) replayClaimed(ctx context.Context, in SendInput, content MessageContent) (r SendResult, ok bool, err error) {
	c, err := h.store.GetClaim(ctx, in.WorkspaceID, in.ClientSubmitID)
	switch {
	case err == nil:
		r, err = h.replay(ctx, c, in, content)
		return r, true, err
	case errors.Is(err, ErrNotFound):
		return SendResult{}, false, nil
	default:
		return SendResult{}, false, storeErr(err, "submit claim")
	}
}

// admitted resolves an admission commit that reported an error: when the
// acknowledgement was lost but the claim for this very Turn is durable,
// the admission happened.
func (h *Host) admitted(ctx context.Context, err error, ws, clientSubmitID, turnID string) bool {
	if !errors.Is(err, ErrUnavailable) {
		return false
	}
	c, cerr := h.store.GetClaim(ctx, ws, clientSubmitID)
	return cerr == nil && c.TurnID == turnID
}

// replay answers a retried ClientSubmitID from its durable claim: the same
// Turn. Different content under the same id is a conflict. A Turn still
// queued with a prepared claim never reached the provider: the retry
// dispatches it (exactly once), unless a dispatch already drives it.
func (h *Host) replay(ctx context.Context, c SubmitClaim, in SendInput, content MessageContent) (SendResult, error) {
	if c.State == ClaimQueued {
		return h.replayQueued(ctx, c, in, content)
	}
	if c.SessionID != in.SessionID || c.Digest != content.Digest() {
		return SendResult{}, &Error{Code: CodeOperationConflict, Reason: "client_submit_id_reused",
			Message: "clientSubmitId was already used with different content or another session"}
	}
	if c.TurnID == "" {
		return SendResult{}, &Error{Code: CodeOperationConflict, Reason: "client_submit_id_reused",
			Message: "clientSubmitId was already used to create a session"}
	}
	t, err := h.store.GetTurn(ctx, c.WorkspaceID, c.SessionID, c.TurnID)
	if err != nil {
		return SendResult{}, storeErr(err, "turn %s", c.TurnID)
	}
	if t.Phase == PhaseDispatched && c.State == ClaimPrepared {
		if sent, ok, err := h.sendUnsent(ctx, t); ok {
			if err != nil {
				return SendResult{}, err
			}
			t = sent
		}
	}
	if t.Phase == PhaseQueued && c.State == ClaimPrepared {
		owner, mine, err := h.ownSession(ctx, c.WorkspaceID, c.SessionID, t.ID)
		if err != nil {
			return SendResult{}, err
		}
		if !mine {
			return h.forwardSend(ctx, owner, in)
		}
		if t, err = h.redrive(ctx, t); err != nil {
			return SendResult{}, storeErr(err, "submit")
		}
	}
	return SendResult{Disposition: DispositionTurnStarted, Turn: &t, Replayed: true}, nil
}
