package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"unicode/utf8"
)

// The turn sink's interaction reports: an agent's request waiting for a person,
// its withdrawal, and a sub-agent's child session in the Turn's tree.

// validateRequest checks a runtime's interaction report.
func validateRequest(req InteractionRequest) error {
	if err := requireIDs(req.RequestID); err != nil {
		return Errorf(CodeInternal, "interaction without a usable request id")
	}
	switch req.Kind {
	case InteractionApproval, InteractionQuestion, InteractionPlan:
	default:
		return Errorf(CodeInternal, "interaction kind %q", req.Kind)
	}
	if len(req.Options) == 0 || len(req.Options) > maxOptions {
		return Errorf(CodeInternal, "an interaction needs 1 to %d options", maxOptions)
	}
	seen := map[string]bool{}
	for _, o := range req.Options {
		if requireIDs(o.ID) != nil || seen[o.ID] {
			return Errorf(CodeInternal, "interaction option ids must be unique printable ids")
		}
		seen[o.ID] = true
	}
	if len(req.Title) > maxInteractText || len(req.Prompt) > maxInteractText {
		return Errorf(CodeInternal, "interaction text too long")
	}
	return nil
}

// Interaction makes an agent's request canonical and pending, after the
// output queued before it. Like output, it is refused before the Turn's
// acceptance barrier. A retried report of a recorded request is a no-op.
func (k *turnSink) Interaction(ctx context.Context, req InteractionRequest) error {
	if err := validateRequest(req); err != nil {
		return err
	}
	if err := k.flushFirst(ctx); err != nil {
		return err
	}
	return k.h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		t, s, err := k.load(ctx, tx, fenceAccepted)
		if err != nil {
			return err
		}
		now := k.h.nowUTC()
		it := Interaction{
			WorkspaceID: t.WorkspaceID, SessionID: t.SessionID, TurnID: t.ID, RequestID: req.RequestID,
			RootSessionID: rootOf(s), Kind: req.Kind, Title: req.Title, Prompt: req.Prompt,
			Options: append([]InteractionOption(nil), req.Options...), Tool: req.Tool,
			State: InteractionPending, CreatedAt: now, UpdatedAt: now,
		}
		// Read before inserting: on PostgreSQL a failed insert would abort
		// the transaction before the duplicate could be examined.
		prev, err := tx.Interaction(ctx, it.Ref())
		switch {
		case err == nil && prev.Kind == it.Kind && prev.Title == it.Title:
			return nil // a retried report of a request already recorded
		case err == nil:
			return wrap(CodeInternal, ErrDuplicate, "interaction %s reported twice with different content", req.RequestID)
		case !errors.Is(err, ErrNotFound):
			return err
		}
		if err := tx.InsertInteraction(ctx, it); err != nil {
			return err
		}
		return emitTree(ctx, tx, emit, s)
	})
}

// Withdraw supersedes a pending request the provider stopped waiting for.
// An answered one is left to its runtime operation; a retry finds nothing
// pending and does nothing.
func (k *turnSink) Withdraw(ctx context.Context, requestID string) error {
	if err := k.flushFirst(ctx); err != nil {
		return err
	}
	ref := InteractionRef{WorkspaceID: k.ref.WorkspaceID, SessionID: k.ref.SessionID, TurnID: k.ref.TurnID, RequestID: requestID}
	err := k.h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		_, s, err := k.load(ctx, tx, fenceUnsettled)
		if err != nil {
			return err
		}
		it, err := tx.Interaction(ctx, ref)
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if it.State != InteractionPending {
			return nil
		}
		it.State, it.Resolution, it.UpdatedAt = InteractionSuperseded, ResolutionWithdrawn, k.h.nowUTC()
		if err := tx.UpdateInteraction(ctx, it, InteractionPending); err != nil {
			return err
		}
		return emitTree(ctx, tx, emit, s)
	})
	if errors.Is(err, errTurnSettled) {
		return nil // settling already ended the Turn's interactions
	}
	return err
}

// Subagent records a child session in this Turn's tree with one Turn that
// is accepted at once: the parent Turn crossed the barrier and the provider
// named the child's identity.
func (k *turnSink) Subagent(ctx context.Context, req SubagentRequest) (TurnRef, TurnSink, error) {
	if req.ProviderSessionID == "" || req.ProviderTurnID == "" {
		return TurnRef{}, nil, Errorf(CodeInternal, "sub-agent without a provider identity")
	}
	title := strings.TrimSpace(req.Title)
	if len(title) > maxSubagentTitle {
		title = title[:maxSubagentTitle]
	}
	for !utf8.ValidString(title) {
		title = title[:len(title)-1]
	}
	if err := k.flushFirst(ctx); err != nil {
		return TurnRef{}, nil, err
	}
	// The child's ids derive from the parent Turn and the provider's
	// session id, so a retry after an ambiguous commit finds the child
	// instead of creating a second one.
	ref := TurnRef{WorkspaceID: k.ref.WorkspaceID,
		SessionID: derivedID("ses", k.ref.TurnID, req.ProviderSessionID),
		TurnID:    derivedID("turn", k.ref.TurnID, req.ProviderSessionID)}
	// The child Turn is driven by this runtime from its first commit: the
	// reconciler must not take it for an orphan.
	k.h.work.drive(ref.TurnID)
	err := k.h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		t, ps, err := k.load(ctx, tx, fenceAccepted)
		if err != nil {
			return err
		}
		switch prev, err := tx.Session(ctx, ref.WorkspaceID, ref.SessionID); {
		case err == nil && prev.ParentID == ps.ID:
			return nil // recorded by an earlier try
		case err == nil:
			return wrap(CodeInternal, ErrDuplicate, "sub-agent session %s exists under another parent", ref.SessionID)
		case !errors.Is(err, ErrNotFound):
			return err
		}
		now := k.h.nowUTC()
		child := Session{
			WorkspaceID: ps.WorkspaceID, ID: ref.SessionID, ParentID: ps.ID, RootID: rootOf(ps),
			Title: title, TitleExplicit: title != "", Agent: ps.Agent, Simulated: ps.Simulated,
			ProviderSessionID: req.ProviderSessionID, TurnCount: 1, CreatedBy: ps.CreatedBy,
			CreatedAt: now, UpdatedAt: now,
		}
		ct := Turn{
			WorkspaceID: child.WorkspaceID, SessionID: child.ID, ID: ref.TurnID, Seq: 1,
			Origin: "subagent", Phase: PhaseDurablyAccepted, ProviderSessionID: req.ProviderSessionID,
			ProviderTurnID: req.ProviderTurnID, SubmittedBy: t.SubmittedBy, CreatedAt: now, UpdatedAt: now,
			TurnLabels: TurnLabels{SubmittedByName: t.SubmittedByName, Agent: t.Agent},
		}
		child.ActiveTurnID = ct.ID
		if err := tx.InsertSession(ctx, child); err != nil {
			return err
		}
		if err := tx.InsertTurn(ctx, ct); err != nil {
			return err
		}
		emit(Fact{WorkspaceID: child.WorkspaceID, Kind: FactSessionChanged, SessionID: child.ID, TurnID: ct.ID})
		return emitTree(ctx, tx, emit, child)
	})
	if err != nil {
		k.h.work.release(ref.TurnID)
		return TurnRef{}, nil, err
	}
	return ref, newTurnSink(k.h, ref, true), nil
}

// derivedID is a stable id for what one parent identity names: prefix_
// and 128 bits of SHA-256 over the parts.
func derivedID(prefix string, parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return prefix + "_" + hex.EncodeToString(h.Sum(nil)[:16])
}
