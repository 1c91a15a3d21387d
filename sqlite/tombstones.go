package sqlite

import (
	"context"
	"database/sql"
	"strings"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// Recoverable tombstones (host.TrashStore, host.TrashTx); the same
// behaviour as pg/tombstones.go. SQLite serializes writers at BEGIN, so
// the tree read inside a transaction is already stable without row locks.

const tombCols = sessionCols + `, deletion_generation, deleted_root_id, deleted_by, deleted_by_name, restorable`

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
	rows, err := q.QueryContext(ctx, `SELECT `+tombCols+` FROM sessions
		WHERE workspace_id = ? AND (root_id = ? OR id = ?) ORDER BY id`, ws, rootID, rootID)
	if err != nil {
		return nil, classify("session tree", err)
	}
	defer rows.Close()
	out := []host.TreeSession{}
	for rows.Next() {
		ts, err := scanTreeSession(rows)
		if err != nil {
			return nil, classify("session tree", err)
		}
		out = append(out, ts)
	}
	if err := rows.Err(); err != nil {
		return nil, classify("session tree", err)
	}
	return out, nil
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
			return notFound("session " + id)
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
	limit := clampLimit(q.Limit, 50, 200)
	query := `SELECT ` + prefixed("s.", tombCols) + ` FROM sessions s WHERE s.workspace_id = ? AND ` + topmostTomb
	args := []any{ws}
	if q.Cursor != "" {
		at, id, err := decodeSessionCursor(q.Cursor)
		if err != nil {
			return host.DeletedPage{}, err
		}
		query += ` AND (s.deleted_at, s.id) < (?, ?)`
		args = append(args, at, id)
	}
	query += ` ORDER BY s.deleted_at DESC, s.id DESC LIMIT ?`
	args = append(args, limit+1)
	rows, err := r.QueryContext(ctx, query, args...)
	if err != nil {
		return host.DeletedPage{}, classify("list deleted", err)
	}
	defer rows.Close()
	page := host.DeletedPage{Sessions: []host.DeletedSession{}}
	for rows.Next() {
		ts, err := scanTreeSession(rows)
		if err != nil {
			return host.DeletedPage{}, classify("list deleted", err)
		}
		page.Sessions = append(page.Sessions, host.DeletedSession{Session: ts.Session, Tombstone: *ts.Tombstone})
	}
	if err := rows.Err(); err != nil {
		return host.DeletedPage{}, classify("list deleted", err)
	}
	if len(page.Sessions) > limit {
		page.Sessions = page.Sessions[:limit]
		last := page.Sessions[limit-1]
		page.NextCursor = encodeSessionCursor(ms(last.Tombstone.DeletedAt), last.Session.ID)
	}
	return page, nil
}

// PurgeCandidates lists old topmost tombstones of every workspace.
func (s *Store) PurgeCandidates(ctx context.Context, cutoff time.Time, after host.PurgeCandidate, limit int) ([]host.PurgeCandidate, error) {
	r, err := s.reader()
	if err != nil {
		return nil, err
	}
	limit = clampLimit(limit, 100, 1000)
	query := `SELECT s.workspace_id, s.id, s.deleted_at FROM sessions s WHERE s.deleted_at <= ? AND ` + topmostTomb
	args := []any{ms(cutoff)}
	if !after.DeletedAt.IsZero() {
		query += ` AND (s.deleted_at, s.workspace_id, s.id) > (?, ?, ?)`
		args = append(args, ms(after.DeletedAt), after.WorkspaceID, after.SessionID)
	}
	query += ` ORDER BY s.deleted_at, s.workspace_id, s.id LIMIT ?`
	args = append(args, limit)
	rows, err := r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, classify("purge candidates", err)
	}
	defer rows.Close()
	var out []host.PurgeCandidate
	for rows.Next() {
		var (
			c  host.PurgeCandidate
			at sql.NullInt64
		)
		if err := rows.Scan(&c.WorkspaceID, &c.SessionID, &at); err != nil {
			return nil, classify("purge candidates", err)
		}
		c.DeletedAt = fromMS(at.Int64)
		out = append(out, c)
	}
	return out, classify("purge candidates", rows.Err())
}

// prefixed qualifies a column list with a table alias.
func prefixed(alias, cols string) string {
	parts := strings.Split(cols, ",")
	for i, p := range parts {
		parts[i] = alias + strings.TrimSpace(p)
	}
	return strings.Join(parts, ", ")
}

var (
	_ host.TrashStore = (*Store)(nil)
	_ host.TrashTx    = (*tx)(nil)
)
