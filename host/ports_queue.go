package host

import (
	"context"
	"time"
)

// Store and Tx methods for the session's message queue (issue 12, seed 003).
//
// Store embeds QueueStore and Tx embeds QueueTx.
//
// Notes for store adapters (sqlite/queue.go is the reference):
//
//   - A session's queue has a revision that starts at 0 (no row yet). Every
//     mutation method below (InsertQueueEntry, UpdateQueueEntry,
//     SetQueueFence) bumps it by one in the same transaction and returns the
//     entry (or fence) stamped with the new revision, so no queue change can
//     commit without a new revision and a rolled-back change leaves the
//     revision where it was.
//   - An entry is keyed by (workspace, session, id); (workspace,
//     clientSubmitId) is unique too. InsertQueueEntry assigns Position (one
//     more than the session's highest so far, never reused) and Revision
//     and AdmittedRevision (both the new queue revision); ErrDuplicate on
//     either key.
//   - UpdateQueueEntry writes State, TurnID, RetractedBy and UpdatedAt and
//     stamps Revision; everything else is immutable. ErrNotFound if absent.
//   - Queue (Store and Tx) returns the revision, the stop fence and the
//     entries still queued, ordered by position. On PostgreSQL the Tx
//     methods lock the session row first, like Tx.Turn.
//   - TurnQueueEntries lists the entries that reached one turn (TurnID),
//     ordered by position.
type QueueStore interface {
	GetQueue(ctx context.Context, ws, sessionID string) (Queue, error)
	GetQueueEntry(ctx context.Context, ws, sessionID, id string) (QueueEntry, error)
	GetQueueEntryBySubmit(ctx context.Context, ws, clientSubmitID string) (QueueEntry, error)
}

// QueueTx is the transactional half of QueueStore.
type QueueTx interface {
	Queue(ctx context.Context, ws, sessionID string) (Queue, error)
	QueueEntry(ctx context.Context, ws, sessionID, id string) (QueueEntry, error)
	QueueEntryBySubmit(ctx context.Context, ws, clientSubmitID string) (QueueEntry, error)
	TurnQueueEntries(ctx context.Context, ws, sessionID, turnID string) ([]QueueEntry, error)
	InsertQueueEntry(ctx context.Context, e QueueEntry) (QueueEntry, error)
	UpdateQueueEntry(ctx context.Context, e QueueEntry) (QueueEntry, error)
	// SetQueueFence records the stop fence (the turn an interrupt stopped;
	// "" clears it) and returns the new revision.
	SetQueueFence(ctx context.Context, ws, sessionID, turnID string) (int64, error)
}

// QueueEntryState is where a queued message is. queued is the only state
// a retract can end; the others are past the pull cut.
type QueueEntryState string

const (
	// QueueQueued: admitted, not yet delivered or started.
	QueueQueued QueueEntryState = "queued"
	// QueuePulled: a steering entry the agent pulled into its running turn.
	QueuePulled QueueEntryState = "pulled"
	// QueueStarted: the entry is (part of) the prompt of turn TurnID.
	QueueStarted QueueEntryState = "started"
	// QueueDone: the turn it reached settled with a known outcome.
	QueueDone QueueEntryState = "done"
	// QueueRetracted: removed before the pull cut.
	QueueRetracted QueueEntryState = "retracted"
	// QueueUnknown: it reached a turn whose outcome cannot be proven (the
	// process died with it); it is never delivered again.
	QueueUnknown QueueEntryState = "unknown"
)

// Valid reports whether s is a known state.
func (s QueueEntryState) Valid() bool {
	switch s {
	case QueueQueued, QueuePulled, QueueStarted, QueueDone, QueueRetracted, QueueUnknown:
		return true
	}
	return false
}

// QueueEntry is one message admitted while a turn ran: steering for the
// running turn or a follow-up for the next one.
// Its JSON tags are the forwarding encoding (inside SendResult), not the
// client protocol: clients get protocol.QueueEntry.
type QueueEntry struct {
	WorkspaceID    string          `json:"workspace"`
	SessionID      string          `json:"sessionId"`
	ID             string          `json:"id"`
	Position       int64           `json:"position"`
	Disposition    Disposition     `json:"disposition"`
	State          QueueEntryState `json:"state"`
	ClientSubmitID string          `json:"clientSubmitId"`
	Author         string          `json:"author"`
	AuthorName     string          `json:"authorName,omitempty"`
	Content        MessageContent  `json:"content"`
	// Digest is what a retry of the same clientSubmitId must match.
	Digest string `json:"-"`
	// TargetTurnID is the running turn a steering entry was admitted for.
	TargetTurnID string `json:"targetTurnId,omitempty"`
	// TurnID is the turn the entry reached (pulled into or started as).
	TurnID string `json:"turnId,omitempty"`
	// AdmittedRevision is the queue revision the admission committed: a
	// retry answers it from the store, on any replica.
	AdmittedRevision int64 `json:"admittedRevision"`
	// Revision is the queue revision of the entry's last change.
	Revision    int64     `json:"revision"`
	RetractedBy string    `json:"retractedBy,omitempty"`
	CreatedAt   time.Time `json:"createdAt"`
	UpdatedAt   time.Time `json:"updatedAt"`
}

// Queue is a session's queue: its revision, the stop fence an interrupt
// set, and the entries still waiting, in order.
type Queue struct {
	Revision    int64
	FenceTurnID string
	Entries     []QueueEntry
	// Steering: the session's agent takes input into a running turn, as
	// far as the replica that answers knows (Host.Queue fills it).
	Steering bool
}
