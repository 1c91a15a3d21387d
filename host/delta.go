package host

import "time"

// FactTranscriptAppended carries a typed TranscriptDelta: the committed change
// itself, built inside the committing transaction from the values it wrote
// and stored in the same outbox row, so the fast path and the relay publish
// identical bytes. A hub whose cached session is exactly at Delta.FromVersion
// applies it; a duplicate (ToVersion at or below what it holds) is dropped; a
// gap rereads canonical state. A delta too large to carry (over
// MaxDeltaBytes encoded) is published as a plain FactTranscriptAdvanced.
const FactTranscriptAppended = "transcript/appended"

// MaxDeltaBytes bounds the encoded size of a delta carried in a fact.
const MaxDeltaBytes = 32 << 10

// TranscriptDelta is one transaction's change to a session's transcript.
// Applying it to a view at exactly FromVersion yields the view at ToVersion.
type TranscriptDelta struct {
	FromVersion int64 `json:"from"`
	ToVersion   int64 `json:"to"`
	// At is the session's UpdatedAt after the commit.
	At time.Time `json:"at"`
	// Messages are the messages this transaction touched, in the order of
	// their new versions; a message appears at most once.
	Messages []MessageChange `json:"messages"`
}

// MessageChange is one message's change inside a TranscriptDelta. Either
// Message is set (the message is new, or changed other than by appending:
// it is the complete message after the commit), or the change is an append:
// Text was appended at Offset (the UTF-16 length of the text before it), Tool
// (when set) replaced the tool state, and Done closed the message.
type MessageChange struct {
	Message *Message `json:"message,omitempty"`

	ID        string    `json:"id,omitempty"`
	TurnID    string    `json:"turnId,omitempty"`
	Version   int64     `json:"version,omitempty"`
	Offset    int       `json:"offset,omitempty"`
	Text      string    `json:"text,omitempty"`
	Tool      *ToolCall `json:"tool,omitempty"`
	Done      bool      `json:"done,omitempty"`
	UpdatedAt time.Time `json:"updatedAt,omitzero"`
}
