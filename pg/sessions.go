package pg

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/internal/sqlcols"
	"github.com/ensemble-dev/ensemble/internal/sqlstore"
)

const sessionCols = sqlcols.Sessions

func scanSession(row sqlstore.Scanner) (host.Session, error) {
	var (
		s        host.Session
		settings *string
	)
	err := row.Scan(&s.WorkspaceID, &s.ID, &s.ParentID, &s.RootID, &s.Title, &s.TitleExplicit,
		&s.Agent, &s.Simulated, &settings, &s.Pinned, &s.ProviderSessionID, &s.MessageVersion,
		&s.TurnCount, &s.ActiveTurnID, &s.Provisional, &s.CreatedBy, &s.CreatedAt, &s.UpdatedAt,
		&s.DeletedAt, &s.ContextLost)
	if err != nil {
		return host.Session{}, err
	}
	s.CreatedAt, s.UpdatedAt, s.DeletedAt = utc(s.CreatedAt), utc(s.UpdatedAt), utcPtr(s.DeletedAt)
	if s.Settings, err = sqlstore.DecodeSettings(settings); err != nil {
		return host.Session{}, fmt.Errorf("session %s/%s: %w", s.WorkspaceID, s.ID, err)
	}
	return s, nil
}

const selectSession = `SELECT ` + sessionCols + ` FROM sessions WHERE workspace_id = $1 AND id = $2`

var selectSessionSummary = `SELECT ` + sqlcols.SessionSummaryFrom + ` WHERE s.workspace_id = $1 AND s.id = $2`

// scanSessionSummary scans a sqlcols.SessionSummaryFrom row.
func scanSessionSummary(row sqlstore.Scanner) (host.Session, error) {
	var (
		s        host.Session
		settings *string
		goal     *string
		fence    *string
	)
	err := row.Scan(&s.WorkspaceID, &s.ID, &s.ParentID, &s.RootID, &s.Title, &s.TitleExplicit,
		&s.Agent, &s.Simulated, &settings, &s.Pinned, &s.ProviderSessionID, &s.MessageVersion,
		&s.TurnCount, &s.ActiveTurnID, &s.Provisional, &s.CreatedBy, &s.CreatedAt, &s.UpdatedAt,
		&s.DeletedAt, &s.ContextLost, &goal, &fence)
	if err != nil {
		return host.Session{}, err
	}
	s.CreatedAt, s.UpdatedAt, s.DeletedAt = utc(s.CreatedAt), utc(s.UpdatedAt), utcPtr(s.DeletedAt)
	if s.Settings, err = sqlstore.DecodeSettings(settings); err != nil {
		return host.Session{}, fmt.Errorf("session %s/%s: %w", s.WorkspaceID, s.ID, err)
	}
	if goal != nil {
		f := ""
		if fence != nil {
			f = *fence
		}
		s.Goal = host.SummarizeGoal([]byte(*goal), f)
	}
	return s, nil
}

func getSession(ctx context.Context, q querier, query, ws, id string) (host.Session, error) {
	return getSessionWith(ctx, q, scanSession, query, ws, id)
}

func getSessionWith(ctx context.Context, q querier, scan func(sqlstore.Scanner) (host.Session, error), query, ws, id string) (host.Session, error) {
	s, err := scan(q.QueryRow(ctx, query, ws, id))
	if isNoRows(err) {
		return host.Session{}, dialect.NotFound("session " + id)
	}
	if err != nil {
		return host.Session{}, classify("get session", err)
	}
	return s, nil
}

// GetSession returns a session in ws, provisional and tombstoned ones too.
func (s *Store) GetSession(ctx context.Context, ws, id string) (host.Session, error) {
	return withPool(ctx, s, func(q querier) (host.Session, error) {
		return getSessionWith(ctx, q, scanSessionSummary, selectSessionSummary, ws, id)
	})
}

// Session reads the session and locks its row until the transaction ends:
// every command on a session is serialized here, across replicas.
func (t *tx) Session(ctx context.Context, ws, id string) (host.Session, error) {
	if t.failed != nil {
		return host.Session{}, t.failed
	}
	if p := t.ahead; p != nil && p.key == (sessionKey{ws, id}) && p.ops == t.tx.ops {
		// Read with its lock in the round trip before, and nothing was
		// queued or sent since: the row is what a read now would return.
		t.ahead = nil
		return p.s, nil
	}
	s, err := getSession(ctx, t.tx, selectSession+` FOR UPDATE`, ws, id)
	if err != nil {
		if isNotFound(err) {
			return s, err
		}
		return s, t.fail(err)
	}
	t.locked[sessionKey{ws, id}] = true
	return s, nil
}

// lockSession takes the session's row lock if this transaction does not
// hold it yet. A missing session locks nothing; the caller's read reports
// the missing row. With readAhead the lock statement reads the whole row
// (t.ahead): a sink's fenced load reads the Turn and then its session, and
// the session then costs no round trip of its own.
func (t *tx) lockSession(ctx context.Context, ws, id string, readAhead bool) error {
	k := sessionKey{ws, id}
	if t.locked[k] {
		return nil
	}
	// Every caller reads right after: the lock goes in the same round trip
	// as that read, ahead of it (txconn.go); a lock timeout fails the read.
	d := deferred{op: "lock session",
		sql:  `SELECT 1 FROM sessions WHERE workspace_id = $1 AND id = $2 FOR UPDATE`,
		args: []any{ws, id},
		check: func(tag pgconn.CommandTag) error {
			if tag.RowsAffected() > 0 {
				t.locked[k] = true
			}
			return nil
		}}
	if readAhead {
		d.sql = selectSession + ` FOR UPDATE`
		d.scan = func(rows pgx.Rows) error {
			s, err := scanSession(rows)
			if err != nil {
				return classify("get session", err)
			}
			t.ahead = &sessionAhead{key: k, s: s, ops: t.tx.ops}
			return nil
		}
	}
	t.tx.queue(d)
	t.probeAfterLock(k)
	return nil
}

// sessionAhead is a session row read with its lock before tx.Session asked
// for it; ops is txConn.ops when it was read.
type sessionAhead struct {
	key sessionKey
	s   host.Session
	ops int
}

func (t *tx) InsertSession(ctx context.Context, s host.Session) error {
	if t.failed != nil {
		return t.failed
	}
	settings, err := sqlstore.EncodeSettings(s.Settings)
	if err != nil {
		return err
	}
	// ON CONFLICT DO NOTHING reports a duplicate without aborting the
	// transaction, as SQLite does; a concurrent insert of the same key
	// waits for the other transaction and then counts as a duplicate.
	tag, err := t.tx.Exec(ctx, `INSERT INTO sessions (`+sessionCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20)
		ON CONFLICT DO NOTHING`,
		s.WorkspaceID, s.ID, s.ParentID, s.RootID, s.Title, s.TitleExplicit, s.Agent,
		s.Simulated, settings, s.Pinned, s.ProviderSessionID, s.MessageVersion,
		s.TurnCount, s.ActiveTurnID, s.Provisional, s.CreatedBy, s.CreatedAt,
		s.UpdatedAt, s.DeletedAt, s.ContextLost)
	if err != nil {
		return t.fail(classify("insert session", err))
	}
	if tag.RowsAffected() == 0 {
		return dialect.Duplicate("insert session " + s.ID)
	}
	// A row this transaction inserted is as good as locked: no other
	// transaction can see it before commit.
	t.locked[sessionKey{s.WorkspaceID, s.ID}] = true
	return nil
}

// UpdateSession rewrites the mutable columns. Placement (parent, root),
// creator and creation time are immutable and left as inserted.
func (t *tx) UpdateSession(ctx context.Context, s host.Session) error {
	if t.failed != nil {
		return t.failed
	}
	settings, err := sqlstore.EncodeSettings(s.Settings)
	if err != nil {
		return err
	}
	return t.updateOne(ctx, rowKey{"sessions", s.WorkspaceID, s.ID}, "update session "+s.ID, updateSessionSQL,
		s.Title, s.TitleExplicit, s.Agent, s.Simulated, settings, s.Pinned,
		s.ProviderSessionID, s.MessageVersion, s.TurnCount, s.ActiveTurnID, s.Provisional,
		s.UpdatedAt, s.DeletedAt, s.ContextLost, s.WorkspaceID, s.ID)
}

const updateSessionSQL = `UPDATE sessions SET title = $1, title_explicit = $2,
	agent = $3, simulated = $4, settings_json = $5, pinned = $6, provider_session_id = $7,
	message_version = $8, turn_count = $9, active_turn_id = $10, provisional = $11,
	updated_at = $12, deleted_at = $13, context_lost = $14
	WHERE workspace_id = $15 AND id = $16`

// AdvanceSession implements host.OutputTx: two columns (deferred like
// UpdateSession when it may be).
func (t *tx) AdvanceSession(ctx context.Context, ws, id string, version int64, at time.Time) error {
	if t.failed != nil {
		return t.failed
	}
	return t.updateOne(ctx, rowKey{"sessions", ws, id}, "advance session "+id, advanceSessionSQL,
		version, at, ws, id)
}

const advanceSessionSQL = `UPDATE sessions SET message_version = $1, updated_at = $2
	WHERE workspace_id = $3 AND id = $4`

// affectedOne turns "no row matched" into host.ErrNotFound.
func (t *tx) affectedOne(op string, tag pgconn.CommandTag, err error) error {
	if err != nil {
		return t.fail(classify(op, err))
	}
	if tag.RowsAffected() == 0 {
		return dialect.NotFound(op)
	}
	return nil
}

// DeleteProvisionalSession removes a provisional shell and everything hung
// on it. A visible session is never hard-deleted this way.
func (t *tx) DeleteProvisionalSession(ctx context.Context, ws, id string) error {
	s, err := t.Session(ctx, ws, id)
	if err != nil {
		return err
	}
	if !s.Provisional {
		return fmt.Errorf("pg: delete session %s: %w", id, errNotProvisional)
	}
	for _, stmt := range []string{
		`DELETE FROM runtime_operations WHERE workspace_id = $1 AND session_id = $2`,
		`DELETE FROM interactions WHERE workspace_id = $1 AND session_id = $2`,
		`DELETE FROM message_parts WHERE workspace_id = $1 AND session_id = $2`,
		`DELETE FROM messages WHERE workspace_id = $1 AND session_id = $2`,
		`DELETE FROM turns WHERE workspace_id = $1 AND session_id = $2`,
		`DELETE FROM submit_claims WHERE workspace_id = $1 AND session_id = $2`,
		`DELETE FROM queue_entries WHERE workspace_id = $1 AND session_id = $2`,
		`DELETE FROM session_queues WHERE workspace_id = $1 AND session_id = $2`,
		`DELETE FROM goal_fences WHERE workspace_id = $1 AND session_id = $2`,
		`DELETE FROM goal_operations WHERE workspace_id = $1 AND session_id = $2`,
		`DELETE FROM goals WHERE workspace_id = $1 AND session_id = $2`,
		`DELETE FROM sessions WHERE workspace_id = $1 AND id = $2`,
	} {
		if _, err := t.tx.Exec(ctx, stmt, ws, id); err != nil {
			return t.fail(classify("delete provisional session", err))
		}
	}
	delete(t.locked, sessionKey{ws, id})
	return nil
}

// ListSessions pages visible sessions newest first by (created_at, id).
func (s *Store) ListSessions(ctx context.Context, ws string, q host.SessionQuery) (host.SessionPage, error) {
	limit := host.ClampLimit(q.Limit, 50, 200)
	query := `SELECT ` + sqlcols.SessionSummaryFrom + `
		WHERE s.workspace_id = $1 AND NOT s.provisional AND s.deleted_at IS NULL`
	args := []any{ws}
	if q.Cursor != "" {
		n, id, err := sqlstore.DecodeCursor(q.Cursor)
		if err != nil {
			return host.SessionPage{}, err
		}
		query += ` AND (s.created_at, s.id) < ($2, $3)`
		args = append(args, time.UnixMicro(n).UTC(), id)
	}
	args = append(args, limit+1)
	query += fmt.Sprintf(` ORDER BY s.created_at DESC, s.id DESC LIMIT $%d`, len(args))

	return withPool(ctx, s, func(db querier) (host.SessionPage, error) {
		sessions, err := queryRows(ctx, db, "list sessions", query, args, sqlstore.All(scanSessionSummary))
		return sqlstore.SessionPage(sessions, limit, func(s host.Session) int64 { return s.CreatedAt.UnixMicro() }), err
	})
}
