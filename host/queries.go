package host

import (
	"context"
	"fmt"
	"strings"
)

// GetSession reads one visible session.
func (h *Host) GetSession(ctx context.Context, ws, id string) (Session, error) {
	if err := requireIDs(ws, id); err != nil {
		return Session{}, err
	}
	s, err := h.store.GetSession(ctx, ws, id)
	if err != nil {
		return Session{}, storeErr(err, "session %s", id)
	}
	if !visible(s) {
		return Session{}, Errorf(CodeNotFound, "session %s not found", id)
	}
	return s, nil
}

// ListSessions pages the workspace's visible sessions, newest first.
func (h *Host) ListSessions(ctx context.Context, ws string, q SessionQuery) (SessionPage, error) {
	if err := requireIDs(ws); err != nil {
		return SessionPage{}, err
	}
	q.Limit = ClampLimit(q.Limit, 50, 200)
	p, err := h.store.ListSessions(ctx, ws, q)
	if err != nil {
		return SessionPage{}, storeErr(err, "list sessions")
	}
	return p, nil
}

// GetTurn reads one turn of a visible session.
func (h *Host) GetTurn(ctx context.Context, ws, sessionID, turnID string) (Turn, error) {
	if _, err := h.GetSession(ctx, ws, sessionID); err != nil {
		return Turn{}, err
	}
	if err := requireIDs(turnID); err != nil {
		return Turn{}, err
	}
	t, err := h.store.GetTurn(ctx, ws, sessionID, turnID)
	if err != nil {
		return Turn{}, storeErr(err, "turn %s", turnID)
	}
	return t, nil
}

// ListSessionTurns pages a session's turns newest first with a stable
// cursor (Turn.Seq).
func (h *Host) ListSessionTurns(ctx context.Context, ws, sessionID string, q TurnQuery) (TurnPage, error) {
	if _, err := h.GetSession(ctx, ws, sessionID); err != nil {
		return TurnPage{}, err
	}
	if q.Before < 0 {
		return TurnPage{}, Errorf(CodeInvalidInput, "before must not be negative")
	}
	q.Limit = ClampLimit(q.Limit, 50, 200)
	p, err := h.store.ListTurns(ctx, ws, sessionID, q)
	if err != nil {
		return TurnPage{}, storeErr(err, "list turns")
	}
	return p, nil
}

// ListSessionMessages pages a session's messages by version cursor,
// optionally narrowed to one turn.
func (h *Host) ListSessionMessages(ctx context.Context, ws, sessionID string, q MessageQuery) (MessagePage, error) {
	if _, err := h.GetSession(ctx, ws, sessionID); err != nil {
		return MessagePage{}, err
	}
	if q.AfterVersion < 0 || q.BeforeVersion < 0 {
		return MessagePage{}, Errorf(CodeInvalidInput, "versions must not be negative")
	}
	q.Limit = ClampLimit(q.Limit, 200, 1000)
	p, err := h.store.ListMessages(ctx, ws, sessionID, q)
	if err != nil {
		return MessagePage{}, storeErr(err, "list messages")
	}
	return p, nil
}

func visible(s Session) bool { return !s.Provisional && s.DeletedAt == nil }

// visibleSession reads (and on PostgreSQL locks) a session inside tx; a
// provisional or deleted session reads as not found.
func visibleSession(ctx context.Context, tx Tx, ws, id string) (Session, error) {
	s, err := tx.Session(ctx, ws, id)
	if err != nil {
		return Session{}, storeErr(err, "session %s", id)
	}
	if !visible(s) {
		return Session{}, Errorf(CodeNotFound, "session %s not found", id)
	}
	return s, nil
}

// ClampLimit is the one page size policy, for the Host's reads and the
// stores' pages alike: a missing or negative limit means def, and no
// caller gets more than max rows at once.
func ClampLimit(n, def, max int) int {
	if n <= 0 {
		return def
	}
	return min(n, max)
}

const maxIDLen = 128

// ReservedIDPrefixes start the ClientSubmitIDs of Host-internal admissions
// (such as the follow-up of a declined approval). A client id that reaches
// into this space is refused, so no member can squat an internal admission.
var ReservedIDPrefixes = []string{"ensemble:", DenyFollowUpPrefix}

// requireClientID validates a caller's ClientSubmitID.
func requireClientID(id string) error {
	if err := requireIDs(id); err != nil {
		return Errorf(CodeInvalidInput, "clientSubmitId: %s", err.(*Error).Message)
	}
	for _, p := range ReservedIDPrefixes {
		if strings.HasPrefix(id, p) {
			return &Error{Code: CodeInvalidInput, Reason: "reserved_id",
				Message: fmt.Sprintf("clientSubmitId may not start with %q: that id space is reserved for the server", p)}
		}
	}
	return nil
}

func requireIDs(ids ...string) error {
	for _, id := range ids {
		if id == "" {
			return Errorf(CodeInvalidInput, "an id is missing")
		}
		if len(id) > maxIDLen {
			return Errorf(CodeInvalidInput, "an id is longer than %d bytes", maxIDLen)
		}
		for _, r := range id {
			if r < 0x21 || r > 0x7e {
				return Errorf(CodeInvalidInput, "ids are printable ASCII without spaces")
			}
		}
	}
	return nil
}

// storeErr maps a store error to a typed error, keeping typed ones as is.
func storeErr(err error, format string, args ...any) error {
	if _, ok := err.(*Error); ok {
		return err
	}
	code := CodeOf(err)
	if code == CodeOperationConflict {
		code = CodeInternal // a duplicate the Host did not expect is a bug, not a client conflict
	}
	msg := format
	switch code {
	case CodeNotFound:
		return wrap(code, err, format+" not found", args...)
	case CodeUnavailable:
		e := wrap(code, err, "store unavailable: "+format, args...)
		e.Reason = ReasonStoreUnavailable
		return e
	}
	return wrap(code, err, msg, args...)
}

// ListTurnInteractions is the durable interaction history of a visible
// session's Turns with fromSeq <= seq <= toSeq: answered, withdrawn,
// superseded and pending alike, with who answered what. Clients page it
// with turn.list and get it in a session snapshot.
func (h *Host) ListTurnInteractions(ctx context.Context, ws, sessionID string, fromSeq, toSeq int64) ([]Interaction, error) {
	if _, err := h.GetSession(ctx, ws, sessionID); err != nil {
		return nil, err
	}
	out, err := h.store.SessionInteractions(ctx, ws, sessionID, fromSeq, toSeq)
	if err != nil {
		return nil, storeErr(err, "interactions of session %s", sessionID)
	}
	return out, nil
}

// SeqRange is the smallest and largest seq of ts (0, -1 when empty, an
// empty range).
func SeqRange(ts []Turn) (from, to int64) {
	if len(ts) == 0 {
		return 0, -1
	}
	from, to = ts[0].Seq, ts[0].Seq
	for _, t := range ts[1:] {
		from, to = min(from, t.Seq), max(to, t.Seq)
	}
	return from, to
}

// GetInteraction reads one interaction by its complete identity.
func (h *Host) GetInteraction(ctx context.Context, ref InteractionRef) (Interaction, error) {
	if _, err := h.GetSession(ctx, ref.WorkspaceID, ref.SessionID); err != nil {
		return Interaction{}, err
	}
	if err := requireIDs(ref.TurnID, ref.RequestID); err != nil {
		return Interaction{}, err
	}
	i, err := h.store.GetInteraction(ctx, ref)
	if err != nil {
		return Interaction{}, storeErr(err, "interaction %s", ref.RequestID)
	}
	return i, nil
}

// GetSessionInteractionTreeSnapshot reads one execution tree in one read:
// the root session's latest Turn and the interactions of that Turn and of
// every descendant session's latest Turn. It accepts only a root session.
// Older turns' pending rows never appear, so they can never be actionable.
func (h *Host) GetSessionInteractionTreeSnapshot(ctx context.Context, ws, rootSessionID string) (InteractionTree, error) {
	s, err := h.GetSession(ctx, ws, rootSessionID)
	if err != nil {
		return InteractionTree{}, err
	}
	if s.ParentID != "" || rootOf(s) != s.ID {
		return InteractionTree{}, &Error{Code: CodeInvalidInput, Reason: "not_root_session",
			Message: "session " + rootSessionID + " is not the root of its tree; read the tree of " + rootOf(s)}
	}
	tree, err := h.store.InteractionTree(ctx, ws, rootSessionID)
	if err != nil {
		return InteractionTree{}, storeErr(err, "interaction tree %s", rootSessionID)
	}
	if tree.Interactions == nil {
		tree.Interactions = []Interaction{}
	}
	return tree, nil
}
