package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/internal/sqlcols"
	"github.com/ensemble-dev/ensemble/internal/sqlstore"
)

const sessionCols = sqlcols.Sessions

func scanSession(sc scanner) (host.Session, error) {
	var (
		s                                      host.Session
		titleExplicit, simulated, pinned, prov int64
		contextLost                            int64
		settings                               *string
		created, updated                       int64
		deleted                                sql.NullInt64
	)
	err := sc.Scan(&s.WorkspaceID, &s.ID, &s.ParentID, &s.RootID, &s.Title, &titleExplicit,
		&s.Agent, &simulated, &settings, &pinned, &s.ProviderSessionID, &s.MessageVersion,
		&s.TurnCount, &s.ActiveTurnID, &prov, &s.CreatedBy, &created, &updated, &deleted, &contextLost)
	if err != nil {
		return host.Session{}, err
	}
	s.TitleExplicit, s.Simulated, s.Pinned, s.Provisional = titleExplicit != 0, simulated != 0, pinned != 0, prov != 0
	s.ContextLost = contextLost != 0
	s.CreatedAt, s.UpdatedAt, s.DeletedAt = fromMS(created), fromMS(updated), fromMSPtr(deleted)
	if s.Settings, err = sqlstore.DecodeSettings(settings); err != nil {
		return host.Session{}, fmt.Errorf("session %s/%s: %w", s.WorkspaceID, s.ID, err)
	}
	return s, nil
}

// summaryRow splits a sqlcols.SessionSummaryFrom row: scanSession's columns, then
// the goal record and the newest fence.
type summaryRow struct {
	sc          scanner
	goal, fence *sql.NullString
}

func (r summaryRow) Scan(dest ...any) error {
	return r.sc.Scan(append(dest, r.goal, r.fence)...)
}

// scanSessionSummary scans a sqlcols.SessionSummaryFrom row.
func scanSessionSummary(sc scanner) (host.Session, error) {
	var goal, fence sql.NullString
	s, err := scanSession(summaryRow{sc, &goal, &fence})
	if err != nil {
		return s, err
	}
	if goal.Valid {
		s.Goal = host.SummarizeGoal([]byte(goal.String), fence.String)
	}
	return s, nil
}

// getSessionSummary is getSession with the session's goal summary.
func getSessionSummary(ctx context.Context, q querier, ws, id string) (host.Session, error) {
	return sqlstore.One(dialect, q.QueryRowContext(ctx, `SELECT `+sqlcols.SessionSummaryFrom+` WHERE s.workspace_id = ? AND s.id = ?`, ws, id),
		scanSessionSummary, "session "+id, "get session")
}

func getSession(ctx context.Context, q querier, ws, id string) (host.Session, error) {
	return sqlstore.One(dialect, q.QueryRowContext(ctx, getSessionSQL, ws, id),
		scanSession, "session "+id, "get session")
}

const getSessionSQL = `SELECT ` + sessionCols + ` FROM sessions WHERE workspace_id = ? AND id = ?`

// GetSession returns a session in ws, provisional and tombstoned ones too.
func (s *Store) GetSession(ctx context.Context, ws, id string) (host.Session, error) {
	r, err := s.reader()
	if err != nil {
		return host.Session{}, err
	}
	return getSessionSummary(ctx, r, ws, id)
}

func (t *tx) Session(ctx context.Context, ws, id string) (host.Session, error) {
	return getSession(ctx, t.tx, ws, id)
}

func (t *tx) InsertSession(ctx context.Context, s host.Session) error {
	settings, err := sqlstore.EncodeSettings(s.Settings)
	if err != nil {
		return err
	}
	_, err = t.tx.ExecContext(ctx, `INSERT INTO sessions (`+sessionCols+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		s.WorkspaceID, s.ID, s.ParentID, s.RootID, s.Title, boolInt(s.TitleExplicit), s.Agent,
		boolInt(s.Simulated), settings, boolInt(s.Pinned), s.ProviderSessionID, s.MessageVersion,
		s.TurnCount, s.ActiveTurnID, boolInt(s.Provisional), s.CreatedBy, ms(s.CreatedAt),
		ms(s.UpdatedAt), msPtr(s.DeletedAt), boolInt(s.ContextLost))
	return classify("insert session", err)
}

// UpdateSession rewrites the mutable columns. Placement (parent, root),
// creator and creation time are immutable and left as inserted.
func (t *tx) UpdateSession(ctx context.Context, s host.Session) error {
	settings, err := sqlstore.EncodeSettings(s.Settings)
	if err != nil {
		return err
	}
	res, err := t.tx.ExecContext(ctx, updateSessionSQL,
		s.Title, boolInt(s.TitleExplicit), s.Agent, boolInt(s.Simulated), settings,
		boolInt(s.Pinned), s.ProviderSessionID, s.MessageVersion, s.TurnCount, s.ActiveTurnID,
		boolInt(s.Provisional), ms(s.UpdatedAt), msPtr(s.DeletedAt), boolInt(s.ContextLost), s.WorkspaceID, s.ID)
	return affectedOne("update session "+s.ID, res, err)
}

const updateSessionSQL = `UPDATE sessions SET title = ?, title_explicit = ?,
		agent = ?, simulated = ?, settings_json = ?, pinned = ?, provider_session_id = ?,
		message_version = ?, turn_count = ?, active_turn_id = ?, provisional = ?,
		updated_at = ?, deleted_at = ?, context_lost = ?
		WHERE workspace_id = ? AND id = ?`

// AdvanceSession implements host.OutputTx: two columns, no index.
func (t *tx) AdvanceSession(ctx context.Context, ws, id string, version int64, at time.Time) error {
	res, err := t.tx.ExecContext(ctx, advanceSessionSQL, version, ms(at), ws, id)
	return affectedOne("advance session "+id, res, err)
}

const advanceSessionSQL = `UPDATE sessions SET message_version = ?, updated_at = ?
		WHERE workspace_id = ? AND id = ?`

// affectedOne turns "no row matched" into host.ErrNotFound.
func affectedOne(op string, res sql.Result, err error) error {
	if err != nil {
		return classify(op, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return classify(op, err)
	}
	if n == 0 {
		return dialect.NotFound(op)
	}
	return nil
}

// DeleteProvisionalSession removes a provisional shell and everything hung
// on it. A visible session is never hard-deleted this way.
func (t *tx) DeleteProvisionalSession(ctx context.Context, ws, id string) error {
	s, err := getSession(ctx, t.tx, ws, id)
	if err != nil {
		return err
	}
	if !s.Provisional {
		return fmt.Errorf("sqlite: delete session %s: %w", id, errNotProvisional)
	}
	for _, stmt := range []string{
		`DELETE FROM runtime_operations WHERE workspace_id = ? AND session_id = ?`,
		`DELETE FROM interactions WHERE workspace_id = ? AND session_id = ?`,
		`DELETE FROM message_parts WHERE workspace_id = ? AND session_id = ?`,
		`DELETE FROM messages WHERE workspace_id = ? AND session_id = ?`,
		`DELETE FROM turns WHERE workspace_id = ? AND session_id = ?`,
		`DELETE FROM submit_claims WHERE workspace_id = ? AND session_id = ?`,
		`DELETE FROM queue_entries WHERE workspace_id = ? AND session_id = ?`,
		`DELETE FROM session_queues WHERE workspace_id = ? AND session_id = ?`,
		`DELETE FROM goal_fences WHERE workspace_id = ? AND session_id = ?`,
		`DELETE FROM goal_operations WHERE workspace_id = ? AND session_id = ?`,
		`DELETE FROM goals WHERE workspace_id = ? AND session_id = ?`,
		`DELETE FROM sessions WHERE workspace_id = ? AND id = ?`,
	} {
		if _, err := t.tx.ExecContext(ctx, stmt, ws, id); err != nil {
			return classify("delete provisional session", err)
		}
	}
	return nil
}

// ListSessions pages visible sessions newest first by (created_at, id).
func (s *Store) ListSessions(ctx context.Context, ws string, q host.SessionQuery) (host.SessionPage, error) {
	r, err := s.reader()
	if err != nil {
		return host.SessionPage{}, err
	}
	limit := host.ClampLimit(q.Limit, 50, 200)
	query := `SELECT ` + sqlcols.SessionSummaryFrom + `
		WHERE s.workspace_id = ? AND s.provisional = 0 AND s.deleted_at IS NULL`
	args := []any{ws}
	if q.Cursor != "" {
		n, id, err := sqlstore.DecodeCursor(q.Cursor)
		if err != nil {
			return host.SessionPage{}, err
		}
		query += ` AND (s.created_at, s.id) < (?, ?)`
		args = append(args, n, id)
	}
	query += ` ORDER BY s.created_at DESC, s.id DESC LIMIT ?`
	args = append(args, limit+1)

	sessions, err := queryRows(ctx, r, "list sessions", query, args, sqlstore.All(scanSessionSummary))
	return sqlstore.SessionPage(sessions, limit, func(s host.Session) int64 { return ms(s.CreatedAt) }), err
}
