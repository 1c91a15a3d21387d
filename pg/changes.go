package pg

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/internal/sqlstore"
)

var _ host.ChangesStore = (*Store)(nil)

// Changes reads a session, its newest turns, named older turns and its
// messages after a version in one read-only REPEATABLE READ transaction
// (one snapshot), sent as one pgx.Batch with its BEGIN and COMMIT: a
// catch-up costs one round trip, however many kinds of rows it reads. If a
// statement fails the connection is left inside the transaction and the
// pool discards it on release.
func (s *Store) Changes(ctx context.Context, ws, sessionID string, q host.ChangesQuery) (host.Changes, error) {
	return withPool(ctx, s, func(db querier) (host.Changes, error) {
		return readChanges(ctx, db.(batcher), ws, sessionID, q)
	})
}

type batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

func readChanges(ctx context.Context, db batcher, ws, sessionID string, q host.ChangesQuery) (c host.Changes, err error) {
	turnLimit := host.ClampLimit(q.Turns, 50, 200)
	msgLimit := host.ClampLimit(q.Messages, 200, 1000)
	b := &pgx.Batch{}
	b.Queue(`BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY`)
	b.Queue(selectSessionSummary, ws, sessionID)
	if !q.NoTurns {
		b.Queue(`SELECT `+turnCols+` FROM turns WHERE workspace_id = $1 AND session_id = $2
			ORDER BY seq DESC LIMIT $3`, ws, sessionID, turnLimit+1)
	}
	for _, id := range q.TurnIDs {
		b.Queue(selectTurn, ws, sessionID, id)
	}
	msgs, msgArgs := sqlstore.VersionQuery{Read: messageRead, Mark: "$", WorkspaceID: ws, SessionID: sessionID,
		After: q.AfterVersion, Desc: q.Newest, Limit: msgLimit + 1}.SQL()
	b.Queue(msgs, msgArgs...)
	b.Queue(`COMMIT`)
	br := db.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); cerr != nil && err == nil {
			err = classify("changes", cerr)
		}
	}()

	if _, err := br.Exec(); err != nil {
		return host.Changes{}, classify("changes: begin", err)
	}
	c.Session, err = scanSessionSummary(br.QueryRow())
	if isNoRows(err) {
		return host.Changes{}, dialect.NotFound("session " + sessionID)
	}
	if err != nil {
		return host.Changes{}, classify("changes: session", err)
	}
	if !q.NoTurns {
		if c.Turns, err = collect(br, scanTurn, "changes: turns"); err != nil {
			return host.Changes{}, err
		}
		page := sqlstore.TurnPage(c.Turns, turnLimit)
		c.Turns, c.TurnsHasMore = page.Turns, page.HasMore
	}
	for _, id := range q.TurnIDs {
		t, err := scanTurn(br.QueryRow())
		switch {
		case isNoRows(err):
		case err != nil:
			return host.Changes{}, classify("changes: turn", err)
		case !slices.ContainsFunc(c.Turns, func(x host.Turn) bool { return x.ID == id }):
			c.Extra = append(c.Extra, t)
		}
	}
	if c.Messages, err = collect(br, scanMessage, "changes: messages"); err != nil {
		return host.Changes{}, err
	}
	page := sqlstore.MessagePage(c.Messages, msgLimit, q.Newest)
	c.Messages, c.MessagesHasMore = page.Messages, page.HasMore
	if _, err := br.Exec(); err != nil {
		return host.Changes{}, classify("changes: commit", err)
	}
	return c, nil
}

// collect scans every row of the batch's next result.
func collect[T any](br pgx.BatchResults, scan func(sqlstore.Scanner) (T, error), what string) ([]T, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, classify(what, err)
	}
	defer rows.Close()
	out, err := sqlstore.Collect(rows, scan)
	return out, classify(what, err)
}
