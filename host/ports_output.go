package host

import (
	"context"
	"time"
	"unicode/utf16"
)

// OutputTx is the write path for streamed output: text is appended in the
// store, never read back and re-encoded, so a chunk costs the same at any
// answer length.
type OutputTx interface {
	// ExpectOutput checks, and on PostgreSQL locks, what the Turn's
	// acceptance or last output commit left: the session at
	// messageVersion and the Turn durably accepted at appliedSeq.
	// ErrNotFound when either moved or is absent.
	// A store may report it with the transaction's next round trip
	// instead of this call (the check then fails the transaction before
	// COMMIT): the Host calls it in place of reading the Turn and the
	// session it wrote last, so the append that follows goes with it.
	ExpectOutput(ctx context.Context, ws, sessionID, turnID string, appliedSeq, messageVersion int64) error
	// AppendMessage creates the message (a.Version becomes its ordinal) or
	// appends a.Text to the existing one, adds a.TextLen to its UTF-16
	// length, replaces the tool state when a.Tool is set, closes it when
	// a.Done, and sets its version and update time. It reports the UTF-16
	// length before the append and whether the message was created.
	//
	// With a.OffsetKnown the caller vouches that the message exists with
	// length a.Offset (its fence checked that nothing wrote the session
	// since): the append must then find exactly that, or fail the
	// transaction with ErrNotFound, and a store may send it with the
	// transaction's next round trip instead of waiting for its result.
	// With a.New the caller vouches that the message does not exist yet
	// (no output of its Turn was applied): the append must create it, on
	// the same terms.
	AppendMessage(ctx context.Context, a MessageAppend) (AppendResult, error)
	// AdvanceTurn records an output commit on its Turn: applied_seq moves
	// forward to seq and updated_at becomes at; no other column is
	// written. ErrNotFound if the Turn is absent.
	AdvanceTurn(ctx context.Context, ws, sessionID, turnID string, seq int64, at time.Time) error
	// AdvanceSession sets a session's message_version and updated_at and
	// no other column. ErrNotFound if the session is absent.
	//
	// Why not UpdateTurn and UpdateSession: they write every mutable
	// column, and SQLite rewrites every index whose columns or partial-
	// index condition an UPDATE names, so a chunk also rewrote an index
	// page of sessions_visible, turns_unsettled and
	// turns_provider_identity: 3 of the 12.3 WAL pages an output commit
	// wrote (sqlite.TestOutputCommitPages).
	AdvanceSession(ctx context.Context, ws, id string, version int64, at time.Time) error
}

// MessageAppend is one message's share of an output batch.
type MessageAppend struct {
	WorkspaceID string
	SessionID   string
	ID          string
	TurnID      string
	Role        Role
	Kind        MessageKind
	Version     int64
	Text        string
	// TextLen is the UTF-16 length of Text (UTF16Len).
	TextLen int
	Tool    *ToolCall
	Done    bool
	At      time.Time
	// Offset is the message's UTF-16 length before this append when
	// OffsetKnown (AppendMessage).
	Offset      int
	OffsetKnown bool
	// New: the message does not exist yet (AppendMessage).
	New bool
}

// AppendResult is what AppendMessage wrote.
type AppendResult struct {
	// Offset is the message's UTF-16 text length before the append.
	Offset  int
	Created bool
}

// UTF16Len is the length of s in UTF-16 code units: the unit of message
// offsets, because browsers index strings that way.
func UTF16Len(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r) // an invalid byte decodes as U+FFFD: one unit, as in JS
	}
	return n
}
