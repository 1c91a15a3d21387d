package host

import "context"

// ChangesStore answers "what changed in this session since version V" in
// one read transaction, so a hub catching up after a gap (or a watcher
// resuming on another replica) sees the session, its turns and its messages
// at one committed instant instead of three reads that may straddle a
// commit.
type ChangesStore interface {
	// Changes reads a session (tombstoned or provisional ones too; the Host
	// filters visibility), its newest turns and the messages changed after
	// q.AfterVersion, all in one read transaction scoped by workspace.
	Changes(ctx context.Context, ws, sessionID string, q ChangesQuery) (Changes, error)
}

// ChangesQuery selects a session's changes.
type ChangesQuery struct {
	// AfterVersion: only messages whose version is above it.
	AfterVersion int64
	// Messages bounds the messages returned. Newest picks the newest changes
	// (MessagesHasMore: older ones exist); otherwise the oldest ones after
	// AfterVersion (MessagesHasMore: newer ones exist).
	Messages int
	Newest   bool
	// Turns is how many newest turns to read; TurnIDs names turns to read
	// besides them (older turns that changed). NoTurns reads none (the
	// caller knows only messages changed).
	Turns   int
	TurnIDs []string
	NoTurns bool
}

// Changes is a session's state at one committed instant. Session.MessageVersion
// is the version the messages are complete up to (unless MessagesHasMore).
type Changes struct {
	Session         Session
	Turns           []Turn // newest first
	TurnsHasMore    bool
	Extra           []Turn    // the TurnIDs not among Turns, when found
	Messages        []Message // ascending by version
	MessagesHasMore bool
}

// SessionChanges reads what changed in a visible session after a version,
// in one read transaction (see ChangesStore).
func (h *Host) SessionChanges(ctx context.Context, ws, sessionID string, q ChangesQuery) (Changes, error) {
	if err := requireIDs(ws, sessionID); err != nil {
		return Changes{}, err
	}
	if q.AfterVersion < 0 {
		return Changes{}, Errorf(CodeInvalidInput, "versions must not be negative")
	}
	if err := requireIDs(q.TurnIDs...); err != nil {
		return Changes{}, err
	}
	q.Messages = ClampLimit(q.Messages, 200, 1000)
	q.Turns = ClampLimit(q.Turns, 50, 200)
	c, err := h.store.Changes(ctx, ws, sessionID, q)
	if err != nil {
		return Changes{}, storeErr(err, "session %s", sessionID)
	}
	if !visible(c.Session) {
		return Changes{}, Errorf(CodeNotFound, "session %s not found", sessionID)
	}
	return c, nil
}
