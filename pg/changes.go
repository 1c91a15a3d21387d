package pg

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/ensemble-dev/ensemble/host"
)

var _ host.ChangesStore = (*Store)(nil)

// Changes reads a session, its newest turns and its messages after a
// version in one read-only REPEATABLE READ transaction (one snapshot). The
// three reads go as one pgx.Batch: a catch-up costs three round trips
// (begin, batch, commit), however many kinds of rows it reads.
func (s *Store) Changes(ctx context.Context, ws, sessionID string, q host.ChangesQuery) (host.Changes, error) {
	return withPool(ctx, s, func(db querier) (host.Changes, error) {
		pool := db.(interface {
			BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error)
		})
		rtx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		if err != nil {
			return host.Changes{}, classify("begin read", err)
		}
		defer func() { _ = rtx.Rollback(context.WithoutCancel(ctx)) }()
		c, err := readChanges(ctx, rtx, ws, sessionID, q)
		if err != nil {
			return host.Changes{}, err
		}
		if err := rtx.Commit(ctx); err != nil {
			return host.Changes{}, classify("end read", err)
		}
		return c, nil
	})
}

func readChanges(ctx context.Context, rtx pgx.Tx, ws, sessionID string, q host.ChangesQuery) (host.Changes, error) {
	turnLimit := clampLimit(q.Turns, 50, 200)
	msgLimit := clampLimit(q.Messages, 200, 1000)
	order := "ASC"
	if q.Newest {
		order = "DESC"
	}
	b := &pgx.Batch{}
	b.Queue(selectSession, ws, sessionID)
	if !q.NoTurns {
		b.Queue(`SELECT `+turnCols+` FROM turns WHERE workspace_id = $1 AND session_id = $2
			ORDER BY seq DESC LIMIT $3`, ws, sessionID, turnLimit+1)
	}
	b.Queue(`SELECT `+messageCols+` FROM messages
		WHERE workspace_id = $1 AND session_id = $2 AND version > $3
		ORDER BY version `+order+` LIMIT $4`, ws, sessionID, q.AfterVersion, msgLimit+1)
	br := rtx.SendBatch(ctx, b)
	defer br.Close()

	var c host.Changes
	var err error
	c.Session, err = scanSession(br.QueryRow())
	if isNoRows(err) {
		return host.Changes{}, notFound("session " + sessionID)
	}
	if err != nil {
		return host.Changes{}, classify("changes: session", err)
	}
	if !q.NoTurns {
		if c.Turns, err = collect(br, scanTurn, "changes: turns"); err != nil {
			return host.Changes{}, err
		}
		if len(c.Turns) > turnLimit {
			c.Turns, c.TurnsHasMore = c.Turns[:turnLimit], true
		}
	}
	if c.Messages, err = collect(br, scanMessage, "changes: messages"); err != nil {
		return host.Changes{}, err
	}
	if len(c.Messages) > msgLimit {
		c.Messages, c.MessagesHasMore = c.Messages[:msgLimit], true
	}
	if q.Newest {
		slices.Reverse(c.Messages)
	}
	if err := br.Close(); err != nil {
		return host.Changes{}, classify("changes", err)
	}
	for _, id := range q.TurnIDs {
		if slices.ContainsFunc(c.Turns, func(t host.Turn) bool { return t.ID == id }) {
			continue
		}
		t, err := getTurn(ctx, rtx, ws, sessionID, id)
		if isNotFound(err) {
			continue
		}
		if err != nil {
			return host.Changes{}, err
		}
		c.Extra = append(c.Extra, t)
	}
	return c, nil
}

// collect scans every row of the batch's next result.
func collect[T any](br pgx.BatchResults, scan func(pgx.Row) (T, error), what string) ([]T, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, classify(what, err)
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, classify(what, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, classify(what, err)
	}
	return out, nil
}
