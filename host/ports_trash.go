package host

import (
	"context"
	"time"
)

// Tombstone is the recoverable-deletion record of one session. Every
// session of one deleted component carries the same tombstone: a restore
// clears exactly the sessions of that generation, and a purge is fenced by
// the exact DeletedAt it selected.
type Tombstone struct {
	DeletedAt time.Time
	// Generation identifies one deleted component; empty on a legacy
	// tombstone (deleted before tombstones were lossless).
	Generation string
	// ComponentRoot is the topmost session of the component.
	ComponentRoot string
	DeletedBy     string
	// DeletedByName is the deleter's display name at the time.
	DeletedByName string
	// Restorable is false for a legacy tombstone and for a component that
	// absorbed one: such a component can only be purged.
	Restorable bool
}

// TreeSession is one session of an execution tree with its tombstone (nil
// while the session is live).
type TreeSession struct {
	Session   Session
	Tombstone *Tombstone
}

// TrashStore is the read side of the trash, implemented by both stores.
type TrashStore interface {
	// SessionTree returns every session whose immutable root is rootID
	// (the root itself included), live, tombstoned and provisional alike,
	// ordered by id.
	SessionTree(ctx context.Context, ws, rootID string) ([]TreeSession, error)
	// ListDeleted pages the workspace's topmost tombstones (no tombstoned
	// parent), newest first by (deletedAt, id).
	ListDeleted(ctx context.Context, ws string, q DeletedQuery) (DeletedPage, error)
	// PurgeCandidates returns topmost tombstones of every workspace with
	// deletedAt <= cutoff, oldest first by (deletedAt, workspace, id),
	// strictly after the given position (zero position: from the start).
	PurgeCandidates(ctx context.Context, cutoff time.Time, after PurgeCandidate, limit int) ([]PurgeCandidate, error)
}

// TrashTx is the write side, inside one Store.Update transaction.
type TrashTx interface {
	// SessionTree is TrashStore.SessionTree inside the transaction; on
	// PostgreSQL it locks every returned session row (in id order).
	SessionTree(ctx context.Context, ws, rootID string) ([]TreeSession, error)
	// SetTombstone writes t on the given sessions, or clears it (t nil).
	// ErrNotFound if a session is absent.
	SetTombstone(ctx context.Context, ws string, ids []string, t *Tombstone) error
	// PurgeSessions hard-deletes the sessions and every row hung on them
	// (turns, messages, parts, interactions, runtime operations, claims,
	// leases) and reports what it removed.
	PurgeSessions(ctx context.Context, ws string, ids []string) (PurgeCounts, error)
}

// DeletedQuery pages the trash.
type DeletedQuery struct {
	Cursor string
	Limit  int
}

// DeletedSession is one topmost tombstone in the trash: the session as it
// was, its tombstone and how many sessions its component holds.
type DeletedSession struct {
	Session   Session
	Tombstone Tombstone
}

// DeletedPage is one page of the trash.
type DeletedPage struct {
	Sessions   []DeletedSession
	NextCursor string
}

// PurgeCandidate is a topmost tombstone retention may remove, with the
// exact deletedAt that fences it.
type PurgeCandidate struct {
	WorkspaceID string
	SessionID   string
	DeletedAt   time.Time
}

// PurgeCounts are the content-free aggregates of a purge.
type PurgeCounts struct {
	Sessions     int
	Turns        int
	Messages     int
	Interactions int
}

func (c *PurgeCounts) add(o PurgeCounts) {
	c.Sessions += o.Sessions
	c.Turns += o.Turns
	c.Messages += o.Messages
	c.Interactions += o.Interactions
}

// SessionDeletionGuard is an optional, provider-neutral admission hook of
// the deletion coordinator. AdmitDeletion receives the exact Host-owned
// closure (sorted session ids) before any runtime is closed or tombstone
// written; an error rejects the delete with no lifecycle side effects.
// Every admitted attempt is then reported to DeletionAttempt: nil when it
// committed, ErrSessionTreeChanged when the store resolved another
// closure (the Host replans and admits the new closure again), or the
// failure. Reporting is observational: it cannot change the result.
type SessionDeletionGuard interface {
	AdmitDeletion(ctx context.Context, ws string, closure []string) error
	DeletionAttempt(ctx context.Context, ws string, closure []string, err error)
}
