package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/internal/sqlcols"
	"github.com/ensemble-dev/ensemble/internal/sqlstore"
)

// The session message queue (host/ports_queue.go). Every mutation bumps
// the session's queue revision in the same transaction: the write lock is
// held from BEGIN IMMEDIATE, so the read-increment-write is atomic.

var (
	_ host.QueueStore = (*Store)(nil)
	_ host.QueueTx    = (*tx)(nil)
)

const queueCols = sqlcols.QueueEntries

func scanQueueEntry(sc scanner) (host.QueueEntry, error) {
	var (
		e                           host.QueueEntry
		disposition, state, content string
		created, updated            int64
	)
	err := sc.Scan(&e.WorkspaceID, &e.SessionID, &e.ID, &e.Position, &disposition, &state,
		&e.ClientSubmitID, &e.Author, &e.AuthorName, &content, &e.Digest, &e.TargetTurnID,
		&e.TurnID, &e.AdmittedRevision, &e.Revision, &e.RetractedBy, &created, &updated)
	if err != nil {
		return host.QueueEntry{}, err
	}
	e.Disposition, e.State = host.Disposition(disposition), host.QueueEntryState(state)
	e.CreatedAt, e.UpdatedAt = fromMS(created), fromMS(updated)
	if !e.State.Valid() {
		return e, fmt.Errorf("sqlite: queue entry %s: unknown state %q", e.ID, state)
	}
	if err := json.Unmarshal([]byte(content), &e.Content); err != nil {
		return e, fmt.Errorf("sqlite: queue entry %s: decode content: %w", e.ID, err)
	}
	return e, nil
}

func getQueueEntry(ctx context.Context, q querier, where string, args ...any) (host.QueueEntry, error) {
	return sqlstore.One(dialect, q.QueryRowContext(ctx, `SELECT `+queueCols+` FROM queue_entries WHERE `+where, args...), scanQueueEntry, "queue entry", "get queue entry")
}

func listQueueEntries(ctx context.Context, q querier, where string, args ...any) ([]host.QueueEntry, error) {
	return queryRows(ctx, q, "list queue entries", `SELECT `+queueCols+` FROM queue_entries WHERE `+where+` ORDER BY position`, args, sqlstore.All(scanQueueEntry))
}

func getQueue(ctx context.Context, q querier, ws, sessionID string) (host.Queue, error) {
	var out host.Queue
	err := q.QueryRowContext(ctx, `SELECT revision, fence_turn_id FROM session_queues
		WHERE workspace_id = ? AND session_id = ?`, ws, sessionID).Scan(&out.Revision, &out.FenceTurnID)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return out, classify("get queue", err)
	}
	out.Entries, err = listQueueEntries(ctx, q, `workspace_id = ? AND session_id = ? AND state = ?`,
		ws, sessionID, string(host.QueueQueued))
	return out, err
}

// GetQueue reads the revision, fence and waiting entries in one read
// transaction, so the entries match the revision.
func (s *Store) GetQueue(ctx context.Context, ws, sessionID string) (host.Queue, error) {
	r, err := s.reader()
	if err != nil {
		return host.Queue{}, err
	}
	rtx, err := r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return host.Queue{}, classify("get queue", err)
	}
	defer rtx.Rollback()
	return getQueue(ctx, rtx, ws, sessionID)
}

func (s *Store) GetQueueEntry(ctx context.Context, ws, sessionID, id string) (host.QueueEntry, error) {
	r, err := s.reader()
	if err != nil {
		return host.QueueEntry{}, err
	}
	return getQueueEntry(ctx, r, `workspace_id = ? AND session_id = ? AND id = ?`, ws, sessionID, id)
}

func (s *Store) GetQueueEntryBySubmit(ctx context.Context, ws, clientSubmitID string) (host.QueueEntry, error) {
	r, err := s.reader()
	if err != nil {
		return host.QueueEntry{}, err
	}
	return getQueueEntry(ctx, r, `workspace_id = ? AND client_submit_id = ?`, ws, clientSubmitID)
}

func (t *tx) Queue(ctx context.Context, ws, sessionID string) (host.Queue, error) {
	return getQueue(ctx, t.tx, ws, sessionID)
}

func (t *tx) QueueEntry(ctx context.Context, ws, sessionID, id string) (host.QueueEntry, error) {
	return getQueueEntry(ctx, t.tx, `workspace_id = ? AND session_id = ? AND id = ?`, ws, sessionID, id)
}

func (t *tx) QueueEntryBySubmit(ctx context.Context, ws, clientSubmitID string) (host.QueueEntry, error) {
	return getQueueEntry(ctx, t.tx, `workspace_id = ? AND client_submit_id = ?`, ws, clientSubmitID)
}

func (t *tx) TurnQueueEntries(ctx context.Context, ws, sessionID, turnID string) ([]host.QueueEntry, error) {
	return listQueueEntries(ctx, t.tx, `workspace_id = ? AND session_id = ? AND turn_id = ?`, ws, sessionID, turnID)
}

// bumpQueue increments the session's queue revision (creating the row at
// 1) and returns it.
func (t *tx) bumpQueue(ctx context.Context, ws, sessionID string) (int64, error) {
	var rev int64
	err := t.tx.QueryRowContext(ctx, `INSERT INTO session_queues (workspace_id, session_id, revision)
		VALUES (?, ?, 1)
		ON CONFLICT (workspace_id, session_id) DO UPDATE SET revision = revision + 1
		RETURNING revision`, ws, sessionID).Scan(&rev)
	return rev, classify("bump queue revision", err)
}

func (t *tx) InsertQueueEntry(ctx context.Context, e host.QueueEntry) (host.QueueEntry, error) {
	content, err := json.Marshal(e.Content)
	if err != nil {
		return e, fmt.Errorf("sqlite: insert queue entry %s: encode content: %w", e.ID, err)
	}
	if !e.State.Valid() {
		return e, fmt.Errorf("sqlite: insert queue entry %s: unknown state %q", e.ID, e.State)
	}
	if err := t.tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(position), 0) + 1 FROM queue_entries
		WHERE workspace_id = ? AND session_id = ?`, e.WorkspaceID, e.SessionID).Scan(&e.Position); err != nil {
		return e, classify("insert queue entry", err)
	}
	rev, err := t.bumpQueue(ctx, e.WorkspaceID, e.SessionID)
	if err != nil {
		return e, err
	}
	e.Revision, e.AdmittedRevision = rev, rev
	_, err = t.tx.ExecContext(ctx, `INSERT INTO queue_entries (`+queueCols+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		e.WorkspaceID, e.SessionID, e.ID, e.Position, string(e.Disposition), string(e.State),
		e.ClientSubmitID, e.Author, e.AuthorName, string(content), e.Digest, e.TargetTurnID,
		e.TurnID, e.AdmittedRevision, e.Revision, e.RetractedBy, ms(e.CreatedAt), ms(e.UpdatedAt))
	return e, classify("insert queue entry "+e.ID, err)
}

func (t *tx) UpdateQueueEntry(ctx context.Context, e host.QueueEntry) (host.QueueEntry, error) {
	if !e.State.Valid() {
		return e, fmt.Errorf("sqlite: update queue entry %s: unknown state %q", e.ID, e.State)
	}
	rev, err := t.bumpQueue(ctx, e.WorkspaceID, e.SessionID)
	if err != nil {
		return e, err
	}
	e.Revision = rev
	res, err := t.tx.ExecContext(ctx, `UPDATE queue_entries SET state = ?, turn_id = ?,
		retracted_by = ?, revision = ?, updated_at = ?
		WHERE workspace_id = ? AND session_id = ? AND id = ?`,
		string(e.State), e.TurnID, e.RetractedBy, e.Revision, ms(e.UpdatedAt),
		e.WorkspaceID, e.SessionID, e.ID)
	// A missing entry fails the statement; the caller's error rolls the
	// bump back with it.
	return e, affectedOne("update queue entry "+e.ID, res, err)
}

func (t *tx) SetQueueFence(ctx context.Context, ws, sessionID, turnID string) (int64, error) {
	rev, err := t.bumpQueue(ctx, ws, sessionID)
	if err != nil {
		return 0, err
	}
	_, err = t.tx.ExecContext(ctx, `UPDATE session_queues SET fence_turn_id = ?
		WHERE workspace_id = ? AND session_id = ?`, turnID, ws, sessionID)
	return rev, classify("set queue fence", err)
}
