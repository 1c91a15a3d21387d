package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"slices"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/internal/sqlstore"
)

var _ host.ChangesStore = (*Store)(nil)

// Changes reads a session, its newest turns and its messages after a
// version in one read transaction: under WAL a deferred transaction reads
// one snapshot from its first statement to its end.
func (s *Store) Changes(ctx context.Context, ws, sessionID string, q host.ChangesQuery) (host.Changes, error) {
	r, err := s.reader()
	if err != nil {
		return host.Changes{}, err
	}
	rtx, err := r.BeginTx(ctx, nil)
	if err != nil {
		return host.Changes{}, classify("begin read", err)
	}
	defer rtx.Rollback() //nolint:errcheck // read-only: nothing to keep
	var c host.Changes
	if c.Session, err = getSessionSummary(ctx, rtx, ws, sessionID); err != nil {
		return host.Changes{}, err
	}
	if !q.NoTurns {
		if c.Turns, c.TurnsHasMore, err = changedTurns(ctx, rtx, ws, sessionID, host.ClampLimit(q.Turns, 50, 200)); err != nil {
			return host.Changes{}, err
		}
	}
	for _, id := range q.TurnIDs {
		if slices.ContainsFunc(c.Turns, func(t host.Turn) bool { return t.ID == id }) {
			continue
		}
		t, err := getTurn(ctx, rtx, ws, sessionID, id)
		if errors.Is(err, host.ErrNotFound) {
			continue
		}
		if err != nil {
			return host.Changes{}, err
		}
		c.Extra = append(c.Extra, t)
	}
	c.Messages, c.MessagesHasMore, err = changedMessages(ctx, rtx, ws, sessionID, q)
	if err != nil {
		return host.Changes{}, err
	}
	return c, nil
}

func changedTurns(ctx context.Context, q querier, ws, sessionID string, limit int) ([]host.Turn, bool, error) {
	turns, err := queryRows(ctx, q, "changes: turns", `SELECT `+turnCols+` FROM turns
		WHERE workspace_id = ? AND session_id = ? ORDER BY seq DESC LIMIT ?`, []any{ws, sessionID, limit + 1}, sqlstore.All(scanTurn))
	page := sqlstore.TurnPage(turns, limit)
	return page.Turns, page.HasMore, err
}

func changedMessages(ctx context.Context, q querier, ws, sessionID string, cq host.ChangesQuery) ([]host.Message, bool, error) {
	limit := host.ClampLimit(cq.Messages, 200, 1000)
	query, args := sqlstore.VersionQuery{Read: messageRead, Mark: "?", WorkspaceID: ws, SessionID: sessionID,
		After: cq.AfterVersion, Desc: cq.Newest, Limit: limit + 1}.SQL()
	msgs, err := queryRows(ctx, q, "changes: messages", query, args, sqlstore.All(scanMessage))
	page := sqlstore.MessagePage(msgs, limit, cq.Newest)
	return page.Messages, page.HasMore, err
}

// querier is satisfied by *sql.Tx too.
var _ querier = (*sql.Tx)(nil)
