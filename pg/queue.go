package pg

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/internal/sqlcols"
	"github.com/ensemble-dev/ensemble/internal/sqlstore"
)

// The session message queue (host/ports_queue.go; sqlite/queue.go is the
// reference). Every Tx method locks the session row first, like Tx.Turn,
// so an admission, a retract, a pull and a turn's settlement on one
// session are serialized by that lock, and every mutation bumps the queue
// revision in the same transaction.

var (
	_ host.QueueStore = (*Store)(nil)
	_ host.QueueTx    = (*tx)(nil)
)

const queueCols = sqlcols.QueueEntries

func scanQueueEntry(row sqlstore.Scanner) (host.QueueEntry, error) {
	var (
		e                           host.QueueEntry
		disposition, state, content string
	)
	err := row.Scan(&e.WorkspaceID, &e.SessionID, &e.ID, &e.Position, &disposition, &state,
		&e.ClientSubmitID, &e.Author, &e.AuthorName, &content, &e.Digest, &e.TargetTurnID,
		&e.TurnID, &e.AdmittedRevision, &e.Revision, &e.RetractedBy, &e.CreatedAt, &e.UpdatedAt)
	if err != nil {
		return host.QueueEntry{}, err
	}
	e.Disposition, e.State = host.Disposition(disposition), host.QueueEntryState(state)
	e.CreatedAt, e.UpdatedAt = utc(e.CreatedAt), utc(e.UpdatedAt)
	if !e.State.Valid() {
		return e, fmt.Errorf("pg: queue entry %s: unknown state %q", e.ID, state)
	}
	if err := json.Unmarshal([]byte(content), &e.Content); err != nil {
		return e, fmt.Errorf("pg: queue entry %s: decode content: %w", e.ID, err)
	}
	return e, nil
}

func getQueueEntry(ctx context.Context, q querier, where string, args ...any) (host.QueueEntry, error) {
	return sqlstore.One(dialect, q.QueryRow(ctx, `SELECT `+queueCols+` FROM queue_entries WHERE `+where, args...), scanQueueEntry, "queue entry", "get queue entry")
}

func listQueueEntries(ctx context.Context, q querier, where string, args ...any) ([]host.QueueEntry, error) {
	return queryRows(ctx, q, "list queue entries", selectQueueEntries(where), args, sqlstore.All(scanQueueEntry))
}

func selectQueueEntries(where string) string {
	return `SELECT ` + queueCols + ` FROM queue_entries WHERE ` + where + ` ORDER BY position`
}

// The entries a Turn took up, and the entries still waiting, of a session
// ($1, $2): by turn ($3) and by state ($3, host.QueueQueued).
const (
	turnEntriesWhere    = `workspace_id = $1 AND session_id = $2 AND turn_id = $3`
	waitingEntriesWhere = `workspace_id = $1 AND session_id = $2 AND state = $3`
)

// selectQueueHead reads a session's queue revision and fence; no row is
// revision 0 without a fence.
const selectQueueHead = `SELECT revision, fence_turn_id FROM session_queues
	WHERE workspace_id = $1 AND session_id = $2`

func getQueue(ctx context.Context, q querier, ws, sessionID string) (host.Queue, error) {
	var out host.Queue
	err := q.QueryRow(ctx, selectQueueHead, ws, sessionID).Scan(&out.Revision, &out.FenceTurnID)
	if err != nil && !isNoRows(err) {
		return out, classify("get queue", err)
	}
	out.Entries, err = listWaiting(ctx, q, ws, sessionID)
	return out, err
}

// listWaiting lists a session's queued entries in queue order.
func listWaiting(ctx context.Context, q querier, ws, sessionID string) ([]host.QueueEntry, error) {
	return listQueueEntries(ctx, q, waitingEntriesWhere, ws, sessionID, string(host.QueueQueued))
}

// GetQueue reads the revision, fence and waiting entries in one read-only
// REPEATABLE READ transaction, so the entries match the revision.
func (s *Store) GetQueue(ctx context.Context, ws, sessionID string) (host.Queue, error) {
	return withSnapshot(ctx, s, func(q querier) (host.Queue, error) {
		return getQueue(ctx, q, ws, sessionID)
	})
}

func (s *Store) GetQueueEntry(ctx context.Context, ws, sessionID, id string) (host.QueueEntry, error) {
	return withPool(ctx, s, func(q querier) (host.QueueEntry, error) {
		return getQueueEntry(ctx, q, `workspace_id = $1 AND session_id = $2 AND id = $3`, ws, sessionID, id)
	})
}

func (s *Store) GetQueueEntryBySubmit(ctx context.Context, ws, clientSubmitID string) (host.QueueEntry, error) {
	return withPool(ctx, s, func(q querier) (host.QueueEntry, error) {
		return getQueueEntry(ctx, q, `workspace_id = $1 AND client_submit_id = $2`, ws, clientSubmitID)
	})
}

// txRead runs one read inside the transaction, recording real failures.
func txRead[T any](t *tx, fn func() (T, error)) (T, error) {
	if t.failed != nil {
		var zero T
		return zero, t.failed
	}
	v, err := fn()
	if err != nil && !isNotFound(err) {
		return v, t.fail(err)
	}
	return v, err
}

// Queue reads the queue in one round trip: the revision and fence are
// read ahead of the waiting entries, in the same batch.
func (t *tx) Queue(ctx context.Context, ws, sessionID string) (host.Queue, error) {
	if t.failed != nil {
		return host.Queue{}, t.failed
	}
	if a := t.queueAhead; a.current(t, ws, sessionID) {
		return a.queue, nil
	}
	if err := t.lockSession(ctx, ws, sessionID, false); err != nil {
		return host.Queue{}, err
	}
	var q host.Queue
	t.tx.queue(deferred{op: "get queue", sql: selectQueueHead, args: []any{ws, sessionID},
		scan: func(rows pgx.Rows) error { return rows.Scan(&q.Revision, &q.FenceTurnID) }})
	entries, err := txRead(t, func() ([]host.QueueEntry, error) { return listWaiting(ctx, t.tx, ws, sessionID) })
	q.Entries = entries
	return q, err
}

func (t *tx) QueueEntry(ctx context.Context, ws, sessionID, id string) (host.QueueEntry, error) {
	if err := t.lockSession(ctx, ws, sessionID, false); err != nil {
		return host.QueueEntry{}, err
	}
	return txRead(t, func() (host.QueueEntry, error) {
		return getQueueEntry(ctx, t.tx, `workspace_id = $1 AND session_id = $2 AND id = $3`, ws, sessionID, id)
	})
}

func (t *tx) QueueEntryBySubmit(ctx context.Context, ws, clientSubmitID string) (host.QueueEntry, error) {
	return txRead(t, func() (host.QueueEntry, error) {
		return getQueueEntry(ctx, t.tx, `workspace_id = $1 AND client_submit_id = $2`, ws, clientSubmitID)
	})
}

func (t *tx) TurnQueueEntries(ctx context.Context, ws, sessionID, turnID string) ([]host.QueueEntry, error) {
	if a := t.queueAhead; a.current(t, ws, sessionID) && a.turn == turnID {
		return a.consumed, nil
	}
	if err := t.lockSession(ctx, ws, sessionID, false); err != nil {
		return nil, err
	}
	return txRead(t, func() ([]host.QueueEntry, error) {
		return listQueueEntries(ctx, t.tx, turnEntriesWhere, ws, sessionID, turnID)
	})
}

// bumpQueueSQL creates the session's queue row at revision 1 or adds one
// to its revision, and returns the revision.
const bumpQueueSQL = `INSERT INTO session_queues (workspace_id, session_id, revision) VALUES ($1, $2, 1)
	ON CONFLICT (workspace_id, session_id) DO UPDATE SET revision = session_queues.revision + 1
	RETURNING revision`

// bumpQueue increments the session's queue revision (creating the row at
// 1) under the session lock and returns it.
func (t *tx) bumpQueue(ctx context.Context, ws, sessionID string) (int64, error) {
	if t.failed != nil {
		return 0, t.failed
	}
	if err := t.lockSession(ctx, ws, sessionID, false); err != nil {
		return 0, err
	}
	var rev int64
	err := t.tx.QueryRow(ctx, bumpQueueSQL, ws, sessionID).Scan(&rev)
	if err != nil {
		return 0, t.fail(classify("bump queue revision", err))
	}
	return rev, nil
}

func (t *tx) InsertQueueEntry(ctx context.Context, e host.QueueEntry) (host.QueueEntry, error) {
	content, err := json.Marshal(e.Content)
	if err != nil {
		return e, fmt.Errorf("pg: insert queue entry %s: encode content: %w", e.ID, err)
	}
	if !e.State.Valid() {
		return e, fmt.Errorf("pg: insert queue entry %s: unknown state %q", e.ID, e.State)
	}
	if t.failed != nil {
		return e, t.failed
	}
	if err := t.lockSession(ctx, e.WorkspaceID, e.SessionID, false); err != nil {
		return e, err
	}
	var inserted bool
	if err := t.tx.QueryRow(ctx, insertQueueEntrySQL,
		e.WorkspaceID, e.SessionID, e.ID, string(e.Disposition), string(e.State),
		e.ClientSubmitID, e.Author, e.AuthorName, string(content), e.Digest, e.TargetTurnID,
		e.TurnID, e.RetractedBy, e.CreatedAt, e.UpdatedAt).Scan(&e.Revision, &e.Position, &inserted); err != nil {
		return e, t.fail(classify("insert queue entry "+e.ID, err))
	}
	e.AdmittedRevision = e.Revision
	if !inserted {
		return e, dialect.Duplicate("insert queue entry " + e.ID)
	}
	return e, nil
}

// insertQueueEntrySQL bumps the session's queue revision, takes the next
// position and inserts the entry stamped with both, in one statement: one
// round trip where the three took three. The parts read one snapshot, as
// the three statements did under the session's lock. ON CONFLICT DO
// NOTHING keeps the transaction usable when the id or the clientSubmitId
// is taken (the caller answers from the other row); the revision is bumped
// either way, as it was.
const insertQueueEntrySQL = `WITH r AS (` + bumpQueueSQL + `), p AS (
	SELECT COALESCE(MAX(position), 0) + 1 AS position FROM queue_entries
	WHERE workspace_id = $1 AND session_id = $2
), i AS (
	INSERT INTO queue_entries (` + queueCols + `)
	SELECT $1, $2, $3, p.position, $4, $5, $6, $7, $8, $9, $10, $11, $12,
		r.revision, r.revision, $13, $14::timestamptz, $15::timestamptz FROM r, p
	ON CONFLICT DO NOTHING
	RETURNING 1
)
SELECT r.revision, p.position, EXISTS (SELECT 1 FROM i) FROM r, p`

func (t *tx) UpdateQueueEntry(ctx context.Context, e host.QueueEntry) (host.QueueEntry, error) {
	if !e.State.Valid() {
		return e, fmt.Errorf("pg: update queue entry %s: unknown state %q", e.ID, e.State)
	}
	rev, err := t.bumpQueue(ctx, e.WorkspaceID, e.SessionID)
	if err != nil {
		return e, err
	}
	e.Revision = rev
	tag, err := t.tx.Exec(ctx, `UPDATE queue_entries SET state = $1, turn_id = $2,
		retracted_by = $3, revision = $4, updated_at = $5
		WHERE workspace_id = $6 AND session_id = $7 AND id = $8`,
		string(e.State), e.TurnID, e.RetractedBy, e.Revision, e.UpdatedAt,
		e.WorkspaceID, e.SessionID, e.ID)
	return e, t.affectedOne("update queue entry "+e.ID, tag, err)
}

func (t *tx) SetQueueFence(ctx context.Context, ws, sessionID, turnID string) (int64, error) {
	rev, err := t.bumpQueue(ctx, ws, sessionID)
	if err != nil {
		return 0, err
	}
	_, err = t.tx.Exec(ctx, `UPDATE session_queues SET fence_turn_id = $1
		WHERE workspace_id = $2 AND session_id = $3`, turnID, ws, sessionID)
	if err != nil {
		return 0, t.fail(classify("set queue fence", err))
	}
	return rev, nil
}
