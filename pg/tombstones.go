package pg

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/internal/sqlcols"
	"github.com/ensemble-dev/ensemble/internal/sqlstore"
)

// Recoverable tombstones (host.TrashStore, host.TrashTx). The tombstone is
// four columns of the session row next to deleted_at, so a delete and a
// restore rewrite nothing else: turns, messages, parts and interactions
// stay byte for byte.

const tombCols = sqlcols.Tombstones

// extraRow appends the tombstone columns to scanSession's destinations.
type extraRow struct {
	row   pgx.Row
	extra []any
}

func (r extraRow) Scan(dest ...any) error { return r.row.Scan(append(dest, r.extra...)...) }

func scanTreeSession(row sqlstore.Scanner) (host.TreeSession, error) {
	var (
		gen, root, by, byName string
		restorable            bool
	)
	s, err := scanSession(extraRow{row, []any{&gen, &root, &by, &byName, &restorable}})
	if err != nil {
		return host.TreeSession{}, err
	}
	ts := host.TreeSession{Session: s}
	if s.DeletedAt != nil {
		ts.Tombstone = &host.Tombstone{DeletedAt: *s.DeletedAt, Generation: gen,
			ComponentRoot: root, DeletedBy: by, DeletedByName: byName, Restorable: restorable && gen != ""}
	}
	return ts, nil
}

func sessionTree(ctx context.Context, q querier, ws, rootID, suffix string) ([]host.TreeSession, error) {
	return queryRows(ctx, q, "session tree", `SELECT `+tombCols+` FROM sessions
		WHERE workspace_id = $1 AND (root_id = $2 OR id = $2) ORDER BY id`+suffix, []any{ws, rootID}, sqlstore.All(scanTreeSession))
}

// SessionTree reads one execution tree outside a transaction.
func (s *Store) SessionTree(ctx context.Context, ws, rootID string) ([]host.TreeSession, error) {
	return withPool(ctx, s, func(q querier) ([]host.TreeSession, error) {
		return sessionTree(ctx, q, ws, rootID, "")
	})
}

// SessionTree locks every session of the tree, in id order (one stable
// order for every deleter, so two deletes of one tree cannot deadlock).
func (t *tx) SessionTree(ctx context.Context, ws, rootID string) ([]host.TreeSession, error) {
	if t.failed != nil {
		return nil, t.failed
	}
	out, err := sessionTree(ctx, t.tx, ws, rootID, " FOR UPDATE")
	if err != nil {
		return nil, t.fail(err)
	}
	for _, ts := range out {
		t.locked[sessionKey{ws, ts.Session.ID}] = true
	}
	return out, nil
}

// SetTombstone writes (or clears) the tombstone of each session.
func (t *tx) SetTombstone(ctx context.Context, ws string, ids []string, tb *host.Tombstone) error {
	if t.failed != nil {
		return t.failed
	}
	for _, id := range ids {
		var (
			at                  *time.Time
			gen, root, by, name string
			restorable          bool
		)
		if tb != nil {
			d := tb.DeletedAt
			at, gen, root, by, name, restorable = &d, tb.Generation, tb.ComponentRoot, tb.DeletedBy, tb.DeletedByName, tb.Restorable
		}
		tag, err := t.tx.Exec(ctx, `UPDATE sessions SET deleted_at = $1, deletion_generation = $2,
			deleted_root_id = $3, deleted_by = $4, deleted_by_name = $5, restorable = $6
			WHERE workspace_id = $7 AND id = $8`, at, gen, root, by, name, restorable, ws, id)
		if err := t.affectedOne("tombstone session "+id, tag, err); err != nil {
			return err
		}
	}
	return nil
}

// PurgeSessions hard-deletes the sessions and everything hung on them.
func (t *tx) PurgeSessions(ctx context.Context, ws string, ids []string) (host.PurgeCounts, error) {
	var c host.PurgeCounts
	if t.failed != nil {
		return c, t.failed
	}
	counted := []struct {
		stmt string
		n    *int
	}{
		{`DELETE FROM runtime_operations WHERE workspace_id = $1 AND session_id = ANY($2)`, nil},
		{`DELETE FROM interactions WHERE workspace_id = $1 AND session_id = ANY($2)`, &c.Interactions},
		{`DELETE FROM message_parts WHERE workspace_id = $1 AND session_id = ANY($2)`, nil},
		{`DELETE FROM messages WHERE workspace_id = $1 AND session_id = ANY($2)`, &c.Messages},
		{`DELETE FROM turns WHERE workspace_id = $1 AND session_id = ANY($2)`, &c.Turns},
		{`DELETE FROM submit_claims WHERE workspace_id = $1 AND session_id = ANY($2)`, nil},
		{`DELETE FROM session_leases WHERE workspace_id = $1 AND session_id = ANY($2)`, nil},
		{`DELETE FROM queue_entries WHERE workspace_id = $1 AND session_id = ANY($2)`, nil},
		{`DELETE FROM session_queues WHERE workspace_id = $1 AND session_id = ANY($2)`, nil},
		{`DELETE FROM goal_fences WHERE workspace_id = $1 AND session_id = ANY($2)`, nil},
		{`DELETE FROM goal_operations WHERE workspace_id = $1 AND session_id = ANY($2)`, nil},
		{`DELETE FROM goals WHERE workspace_id = $1 AND session_id = ANY($2)`, nil},
		{`DELETE FROM sessions WHERE workspace_id = $1 AND id = ANY($2)`, &c.Sessions},
	}
	for _, st := range counted {
		tag, err := t.tx.Exec(ctx, st.stmt, ws, ids)
		if err != nil {
			return host.PurgeCounts{}, t.fail(classify("purge sessions", err))
		}
		if st.n != nil {
			*st.n = int(tag.RowsAffected())
		}
	}
	for _, id := range ids {
		delete(t.locked, sessionKey{ws, id})
	}
	return c, nil
}

// topmost: a tombstone whose parent is absent or live.
const topmostTomb = `s.deleted_at IS NOT NULL AND NOT s.provisional AND NOT EXISTS (
	SELECT 1 FROM sessions p WHERE p.workspace_id = s.workspace_id AND p.id = s.parent_id
	  AND s.parent_id <> '' AND p.deleted_at IS NOT NULL)`

// ListDeleted pages topmost tombstones newest first by (deleted_at, id).
func (s *Store) ListDeleted(ctx context.Context, ws string, q host.DeletedQuery) (host.DeletedPage, error) {
	limit := host.ClampLimit(q.Limit, 50, 200)
	query := `SELECT ` + sqlcols.Prefixed("s.", tombCols) + ` FROM sessions s WHERE s.workspace_id = $1 AND ` + topmostTomb
	args := []any{ws}
	if q.Cursor != "" {
		n, id, err := sqlstore.DecodeCursor(q.Cursor)
		if err != nil {
			return host.DeletedPage{}, err
		}
		query += ` AND (s.deleted_at, s.id) < ($2, $3)`
		args = append(args, time.UnixMicro(n).UTC(), id)
	}
	args = append(args, limit+1)
	query += fmt.Sprintf(` ORDER BY s.deleted_at DESC, s.id DESC LIMIT $%d`, len(args))
	return withPool(ctx, s, func(db querier) (host.DeletedPage, error) {
		trees, err := queryRows(ctx, db, "list deleted", query, args, sqlstore.All(scanTreeSession))
		return sqlstore.DeletedPage(trees, limit, func(t host.Tombstone) int64 { return t.DeletedAt.UnixMicro() }), err
	})
}

// PurgeCandidates lists old topmost tombstones of every workspace.
func (s *Store) PurgeCandidates(ctx context.Context, cutoff time.Time, after host.PurgeCandidate, limit int) ([]host.PurgeCandidate, error) {
	limit = host.ClampLimit(limit, 100, 1000)
	query := `SELECT s.workspace_id, s.id, s.deleted_at FROM sessions s
		WHERE s.deleted_at <= $1 AND ` + topmostTomb
	args := []any{cutoff}
	if !after.DeletedAt.IsZero() {
		query += ` AND (s.deleted_at, s.workspace_id, s.id) > ($2, $3, $4)`
		args = append(args, after.DeletedAt, after.WorkspaceID, after.SessionID)
	}
	args = append(args, limit)
	query += fmt.Sprintf(` ORDER BY s.deleted_at, s.workspace_id, s.id LIMIT $%d`, len(args))
	return withPool(ctx, s, func(db querier) ([]host.PurgeCandidate, error) {
		return queryRows(ctx, db, "purge candidates", query, args, sqlstore.All(sqlstore.PurgeCandidate(timestamptz)))
	})
}

var (
	_ host.TrashStore = (*Store)(nil)
	_ host.TrashTx    = (*tx)(nil)
)

// purgeLockKey is the advisory lock that lets one replica at a time run
// trash retention, one per schema (the first on the connection's
// search_path, as migrationLockID): advisory locks are database-wide, and
// deployments, or tests, in other schemas of one database purge their own
// trash.
const purgeLockKey = `hashtextextended('ensemble trash purge' || current_schema(), 0)`

// TryPurgeLock takes the session-level advisory lock on a dedicated pooled
// connection; release unlocks it and returns the connection. A replica
// that dies loses the lock with its connection.
func (s *Store) TryPurgeLock(ctx context.Context) (func(), bool, error) {
	pool, err := s.db()
	if err != nil {
		return nil, false, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, false, classify("purge lock", err)
	}
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(`+purgeLockKey+`)`).Scan(&ok); err != nil {
		conn.Release()
		return nil, false, classify("purge lock", err)
	}
	if !ok {
		conn.Release()
		return nil, false, nil
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock(`+purgeLockKey+`)`); err != nil {
			// The lock must not outlive this pass on a pooled connection.
			_ = conn.Conn().Close(ctx)
		}
		conn.Release()
	}, true, nil
}

var _ host.PurgeLocker = (*Store)(nil)
