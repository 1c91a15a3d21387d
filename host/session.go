package host

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
)

const maxSettings = 32

// CreateSession creates an empty session, or a provisional one with initial
// content that becomes visible only once that first submission is durable;
// a first delivery that fails before reaching the provider rolls the shell
// back. A retried ClientSubmitID returns the same session (and turn).
func (h *Host) CreateSession(ctx context.Context, in CreateSessionInput) (CreateSessionResult, error) {
	if err := requireIDs(in.WorkspaceID); err != nil {
		return CreateSessionResult{}, err
	}
	if in.Goal != nil {
		return h.createWithGoal(ctx, in)
	}
	title, err := normalizeTitle(in.Title)
	if err != nil {
		return CreateSessionResult{}, err
	}
	if in.Settings != nil {
		if in.Settings, err = h.normalizeSettings(in.Settings); err != nil {
			return CreateSessionResult{}, err
		}
	}
	var content *MessageContent
	if in.Content != nil {
		c, err := in.Content.Normalize()
		if err != nil {
			return CreateSessionResult{}, err
		}
		content = &c
	}
	if in.ClientSubmitID != "" {
		if err := requireClientID(in.ClientSubmitID); err != nil {
			return CreateSessionResult{}, err
		}
	} else if content != nil {
		in.ClientSubmitID = h.newID("submit") // no caller retry identity: still claim once
	}
	digest := createDigest(title, in.Settings, content)
	if in.ClientSubmitID != "" {
		if r, ok, err := h.replayCreate(ctx, in.WorkspaceID, in.ClientSubmitID, digest); ok || err != nil {
			return r, err
		}
	}

	agent := h.runtime.Describe()
	now := h.nowUTC()
	sess := Session{
		WorkspaceID: in.WorkspaceID, ID: h.newID("ses"), Title: title, TitleExplicit: title != "",
		Agent: agent.Name, Simulated: agent.Simulated, Settings: in.Settings,
		Provisional: content != nil, CreatedBy: in.CreatedBy, CreatedAt: now, UpdatedAt: now,
	}
	sess.RootID = sess.ID
	var turn Turn
	var claim SubmitClaim
	turnID := h.newID("turn")
	if content != nil {
		h.work.drive(turnID) // before the commit: see SendInput
	}
	err = h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		if err := tx.InsertSession(ctx, sess); err != nil {
			return err
		}
		if content == nil {
			emit(Fact{WorkspaceID: sess.WorkspaceID, Kind: FactSessionChanged, SessionID: sess.ID})
			if in.ClientSubmitID == "" {
				return nil
			}
			// An empty create is made idempotent by a claim with no Turn.
			return tx.InsertClaim(ctx, SubmitClaim{WorkspaceID: sess.WorkspaceID,
				ClientSubmitID: in.ClientSubmitID, SessionID: sess.ID, Digest: digest,
				State: ClaimAccepted, CreatedAt: now, UpdatedAt: now})
		}
		var err error
		sess, turn, claim, err = h.admit(ctx, tx, emit, sess, turnID, in.ClientSubmitID, *content, digest, in.CreatedBy, in.CreatedByName, PhaseQueued)
		return err
	})
	if err != nil && content != nil && h.admitted(ctx, err, in.WorkspaceID, in.ClientSubmitID, turnID) {
		err = nil // the commit landed; only its acknowledgement was lost
	}
	if err != nil {
		h.work.release(turnID)
	}
	if errors.Is(err, ErrDuplicate) && in.ClientSubmitID != "" {
		if r, ok, rerr := h.replayCreate(ctx, in.WorkspaceID, in.ClientSubmitID, digest); ok || rerr != nil {
			return r, rerr
		}
	}
	if err != nil {
		return CreateSessionResult{}, storeErr(err, "create session")
	}
	if content == nil {
		return CreateSessionResult{Session: sess}, nil
	}
	t, err := h.dispatch(ctx, sess, turn, claim, true)
	if err != nil {
		return CreateSessionResult{}, err
	}
	s, err := h.store.GetSession(ctx, sess.WorkspaceID, sess.ID)
	if err != nil {
		return CreateSessionResult{}, storeErr(err, "session %s", sess.ID)
	}
	return CreateSessionResult{Session: s, Turn: &t}, nil
}

// createDigest fingerprints every input of a create request that shapes
// the session (title, settings, content) so a reused ClientSubmitID with a
// different request is a conflict. A create has no parent: forks and
// sub-agent sessions have their own identities.
func createDigest(title string, settings map[string]string, content *MessageContent) string {
	c := MessageContent{Text: "\x00create\x00" + title}
	keys := slices.Sorted(maps.Keys(settings))
	for _, k := range keys {
		// Length-prefixed, so no two setting maps share a rendering.
		c.Quotes = append(c.Quotes, Quote{Text: fmt.Sprintf("setting:%d:%s=%s", len(k), k, settings[k])})
	}
	if content != nil {
		c.Quotes = append(c.Quotes, Quote{Text: content.Digest()})
	}
	return c.Digest()
}

func (h *Host) replayCreate(ctx context.Context, ws, clientSubmitID, digest string) (CreateSessionResult, bool, error) {
	c, err := h.store.GetClaim(ctx, ws, clientSubmitID)
	if errors.Is(err, ErrNotFound) {
		return CreateSessionResult{}, false, nil
	}
	if err != nil {
		return CreateSessionResult{}, false, storeErr(err, "submit claim")
	}
	if c.Digest != digest || c.State == ClaimQueued { // a queue entry's id never creates a session
		return CreateSessionResult{}, true, &Error{Code: CodeOperationConflict, Reason: "client_submit_id_reused",
			Message: "clientSubmitId was already used with a different request"}
	}
	s, err := h.store.GetSession(ctx, ws, c.SessionID)
	if err != nil {
		return CreateSessionResult{}, true, storeErr(err, "session %s", c.SessionID)
	}
	if s.Provisional {
		// Never hand out a session that is not visible: join the first
		// attempt if it is gone (its Turn is still queued), else ask the
		// caller to come back.
		return h.resumeCreate(ctx, s, c)
	}
	res := CreateSessionResult{Session: s}
	if c.TurnID != "" {
		t, err := h.store.GetTurn(ctx, ws, c.SessionID, c.TurnID)
		if err != nil {
			return CreateSessionResult{}, true, storeErr(err, "turn %s", c.TurnID)
		}
		res.Turn = &t
	}
	return res, true, nil
}

// resumeCreate drives the first Turn of a provisional session whose create
// attempt died before dispatching it, or answers create_in_progress.
func (h *Host) resumeCreate(ctx context.Context, s Session, c SubmitClaim) (CreateSessionResult, bool, error) {
	inProgress := &Error{Code: CodeUnavailable, Reason: ReasonCreateInProgress,
		Message: "the session is still being created; retry with the same clientSubmitId"}
	t, err := h.store.GetTurn(ctx, s.WorkspaceID, s.ID, c.TurnID)
	if err != nil {
		return CreateSessionResult{}, true, storeErr(err, "turn %s", c.TurnID)
	}
	if t.Phase != PhaseQueued || c.State != ClaimPrepared || !h.work.drive(t.ID) {
		return CreateSessionResult{}, true, inProgress
	}
	if t, err = h.dispatch(ctx, s, t, c, true); err != nil {
		return CreateSessionResult{}, true, err
	}
	vis, err := h.store.GetSession(ctx, s.WorkspaceID, s.ID)
	if err != nil {
		return CreateSessionResult{}, true, storeErr(err, "session %s", s.ID)
	}
	if !visible(vis) {
		return CreateSessionResult{}, true, inProgress
	}
	return CreateSessionResult{Session: vis, Turn: &t}, true, nil
}

// UpdateSession changes title, pin or settings. An explicit title is
// final: derived titles never replace it. Settings are validated
// (settings.go) and accepted by a live runtime before they are persisted.
func (h *Host) UpdateSession(ctx context.Context, in UpdateSessionInput) (Session, error) {
	if err := requireIDs(in.WorkspaceID, in.SessionID); err != nil {
		return Session{}, err
	}
	if in.Title != nil {
		if _, err := normalizeTitle(*in.Title); err != nil {
			return Session{}, err
		}
	}
	if in.Settings == nil {
		return h.persistUpdate(ctx, in, nil)
	}
	settings, err := h.normalizeSettings(*in.Settings)
	if err != nil {
		return Session{}, err
	}
	return h.updateSettings(ctx, in, settings)
}
