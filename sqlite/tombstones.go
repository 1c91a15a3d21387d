package sqlite

import (
	"context"
	"strings"
	"time"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/internal/sqlcols"
	"github.com/ensemble-dev/ensemble/internal/sqlstore"
)

// Recoverable tombstones (host.TrashStore, host.TrashTx); the same
// behaviour as pg/tombstones.go. SQLite serializes writers at BEGIN, so
// the tree read inside a transaction is already stable without row locks.

const tombCols = sqlcols.Tombstones

// extraRow appends the tombstone columns to scanSession's destinations.
type extraRow struct {
	row   scanner
	extra []any
}

func (r extraRow) Scan(dest ...any) error { return r.row.Scan(append(dest, r.extra...)...) }

func scanTreeSession(row scanner) (host.TreeSession, error) {
	var (
		gen, root, by, byName string
		restorable            int64
	)
	s, err := scanSession(extraRow{row, []any{&gen, &root, &by, &byName, &restorable}})
	if err != nil {
		return host.TreeSession{}, err
	}
	ts := host.TreeSession{Session: s}
	if s.DeletedAt != nil {
		ts.Tombstone = &host.Tombstone{DeletedAt: *s.DeletedAt, Generation: gen,
			ComponentRoot: root, DeletedBy: by, DeletedByName: byName, Restorable: restorable != 0 && gen != ""}
	}
	return ts, nil
}

func sessionTree(ctx context.Context, q querier, ws, rootID string) ([]host.TreeSession, error) {
	return queryRows(ctx, q, "session tree", `SELECT `+tombCols+` FROM sessions
		WHERE workspace_id = ? AND (root_id = ? OR id = ?) ORDER BY id`, []any{ws, rootID, rootID}, sqlstore.All(scanTreeSession))
}

// SessionTree reads one execution tree from the read pool.
func (s *Store) SessionTree(ctx context.Context, ws, rootID string) ([]host.TreeSession, error) {
	r, err := s.reader()
	if err != nil {
		return nil, err
	}
	return sessionTree(ctx, r, ws, rootID)
}

// SessionTree reads the tree inside the write transaction.
func (t *tx) SessionTree(ctx context.Context, ws, rootID string) ([]host.TreeSession, error) {
	return sessionTree(ctx, t.tx, ws, rootID)
}

// SetTombstone writes (or clears) the tombstone of each session.
func (t *tx) SetTombstone(ctx context.Context, ws string, ids []string, tb *host.Tombstone) error {
	for _, id := range ids {
		var (
			at                  any
			gen, root, by, name string
			restorable          bool
		)
		if tb != nil {
			at, gen, root, by, name, restorable = ms(tb.DeletedAt), tb.Generation, tb.ComponentRoot, tb.DeletedBy, tb.DeletedByName, tb.Restorable
		}
		res, err := t.tx.ExecContext(ctx, `UPDATE sessions SET deleted_at = ?, deletion_generation = ?,
			deleted_root_id = ?, deleted_by = ?, deleted_by_name = ?, restorable = ?
			WHERE workspace_id = ? AND id = ?`, at, gen, root, by, name, boolInt(restorable), ws, id)
		if err != nil {
			return classify("tombstone session", err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return classify("tombstone session", err)
		} else if n == 0 {
			return dialect.NotFound("session " + id)
		}
	}
	return nil
}

// PurgeSessions hard-deletes the sessions and everything hung on them.
func (t *tx) PurgeSessions(ctx context.Context, ws string, ids []string) (host.PurgeCounts, error) {
	var c host.PurgeCounts
	if len(ids) == 0 {
		return c, nil
	}
	in := "(" + strings.TrimSuffix(strings.Repeat("?,", len(ids)), ",") + ")"
	args := make([]any, 0, len(ids)+1)
	args = append(args, ws)
	for _, id := range ids {
		args = append(args, id)
	}
	steps := []struct {
		stmt string
		n    *int
	}{
		{`DELETE FROM runtime_operations WHERE workspace_id = ? AND session_id IN ` + in, nil},
		{`DELETE FROM interactions WHERE workspace_id = ? AND session_id IN ` + in, &c.Interactions},
		{`DELETE FROM message_parts WHERE workspace_id = ? AND session_id IN ` + in, nil},
		{`DELETE FROM messages WHERE workspace_id = ? AND session_id IN ` + in, &c.Messages},
		{`DELETE FROM turns WHERE workspace_id = ? AND session_id IN ` + in, &c.Turns},
		{`DELETE FROM submit_claims WHERE workspace_id = ? AND session_id IN ` + in, nil},
		{`DELETE FROM session_leases WHERE workspace_id = ? AND session_id IN ` + in, nil},
		{`DELETE FROM queue_entries WHERE workspace_id = ? AND session_id IN ` + in, nil},
		{`DELETE FROM session_queues WHERE workspace_id = ? AND session_id IN ` + in, nil},
		{`DELETE FROM goal_fences WHERE workspace_id = ? AND session_id IN ` + in, nil},
		{`DELETE FROM goal_operations WHERE workspace_id = ? AND session_id IN ` + in, nil},
		{`DELETE FROM goals WHERE workspace_id = ? AND session_id IN ` + in, nil},
		{`DELETE FROM sessions WHERE workspace_id = ? AND id IN ` + in, &c.Sessions},
	}
	for _, st := range steps {
		res, err := t.tx.ExecContext(ctx, st.stmt, args...)
		if err != nil {
			return host.PurgeCounts{}, classify("purge sessions", err)
		}
		if st.n != nil {
			n, err := res.RowsAffected()
			if err != nil {
				return host.PurgeCounts{}, classify("purge sessions", err)
			}
			*st.n = int(n)
		}
	}
	return c, nil
}

// topmost: a tombstone whose parent is absent or live.
const topmostTomb = `s.deleted_at IS NOT NULL AND s.provisional = 0 AND NOT EXISTS (
	SELECT 1 FROM sessions p WHERE p.workspace_id = s.workspace_id AND p.id = s.parent_id
	  AND s.parent_id <> '' AND p.deleted_at IS NOT NULL)`

// ListDeleted pages topmost tombstones newest first by (deleted_at, id).
func (s *Store) ListDeleted(ctx context.Context, ws string, q host.DeletedQuery) (host.DeletedPage, error) {
	r, err := s.reader()
	if err != nil {
		return host.DeletedPage{}, err
	}
	limit := host.ClampLimit(q.Limit, 50, 200)
	query := `SELECT ` + sqlcols.Prefixed("s.", tombCols) + ` FROM sessions s WHERE s.workspace_id = ? AND ` + topmostTomb
	args := []any{ws}
	if q.Cursor != "" {
		n, id, err := sqlstore.DecodeCursor(q.Cursor)
		if err != nil {
			return host.DeletedPage{}, err
		}
		query += ` AND (s.deleted_at, s.id) < (?, ?)`
		args = append(args, n, id)
	}
	query += ` ORDER BY s.deleted_at DESC, s.id DESC LIMIT ?`
	args = append(args, limit+1)
	trees, err := queryRows(ctx, r, "list deleted", query, args, sqlstore.All(scanTreeSession))
	return sqlstore.DeletedPage(trees, limit, func(t host.Tombstone) int64 { return ms(t.DeletedAt) }), err
}

// PurgeCandidates lists old topmost tombstones of every workspace.
func (s *Store) PurgeCandidates(ctx context.Context, cutoff time.Time, after host.PurgeCandidate, limit int) ([]host.PurgeCandidate, error) {
	r, err := s.reader()
	if err != nil {
		return nil, err
	}
	limit = host.ClampLimit(limit, 100, 1000)
	query := `SELECT s.workspace_id, s.id, s.deleted_at FROM sessions s WHERE s.deleted_at <= ? AND ` + topmostTomb
	args := []any{ms(cutoff)}
	if !after.DeletedAt.IsZero() {
		query += ` AND (s.deleted_at, s.workspace_id, s.id) > (?, ?, ?)`
		args = append(args, ms(after.DeletedAt), after.WorkspaceID, after.SessionID)
	}
	query += ` ORDER BY s.deleted_at, s.workspace_id, s.id LIMIT ?`
	args = append(args, limit)
	return queryRows(ctx, r, "purge candidates", query, args, sqlstore.All(sqlstore.PurgeCandidate(unixMS)))
}

var (
	_ host.TrashStore = (*Store)(nil)
	_ host.TrashTx    = (*tx)(nil)
)
