package pg

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/internal/sqlstore"
)

// AppendFacts writes facts to the outbox inside the caller's transaction, so
// they become durable exactly when the state they describe does: one row
// for the facts of one workspace (sqlstore.FactRows), all rows in one
// statement; identity values are drawn in row order, so the sorted ids
// line up with rows. The statement is deferred: it goes with COMMIT (or
// the next statement), and the returned slice is filled when its rows come
// back, before Update returns (host.Tx.AppendFacts). The row updates
// queued just before it (the Turn's, the session's) run as parts of it:
// one statement for the server to execute instead of three.
func (t *tx) AppendFacts(ctx context.Context, facts ...host.Fact) ([]int64, error) {
	if t.failed != nil {
		return nil, t.failed
	}
	if len(facts) == 0 {
		return []int64{}, nil
	}
	rows, err := sqlstore.FactRows(facts)
	if err != nil {
		return nil, fmt.Errorf("pg: append facts: %w", err)
	}
	ws := make([]string, len(rows))
	payloads := make([]string, len(rows))
	for i, r := range rows {
		ws[i], payloads[i] = r.WorkspaceID, r.JSON
	}
	parts := t.tx.takeUpdates()
	sql, args := appendFactsSQL(parts, ws, payloads)
	ids := make([]int64, len(facts))
	var got []int64
	affected := make([]int64, len(parts))
	dest := []any{new(int64)}
	for i := range affected {
		dest = append(dest, &affected[i])
	}
	var op strings.Builder
	for _, p := range parts {
		op.WriteString(p.op + " + ")
	}
	op.WriteString("append facts")
	t.tx.queue(deferred{op: op.String(), late: true, sql: sql, args: args,
		scan: func(r pgx.Rows) error {
			err := r.Scan(dest...)
			got = append(got, *dest[0].(*int64))
			return err
		},
		check: func(pgconn.CommandTag) error {
			for i, p := range parts {
				if err := p.check(pgconn.NewCommandTag(fmt.Sprintf("UPDATE %d", affected[i]))); err != nil {
					return err
				}
			}
			if len(got) != len(rows) {
				return fmt.Errorf("pg: append facts: %d ids for %d rows", len(got), len(rows))
			}
			slices.Sort(got)
			copy(ids, sqlstore.FactIDs(rows, got))
			return nil
		}})
	return ids, nil
}

// appendFactsSQL is the outbox insert with parts, each an UPDATE of one row
// run as a data-modifying WITH query of it; every row the insert returns
// carries how many rows each part updated. Parts see the snapshot the
// insert sees and touch other tables than it, so their order is moot.
func appendFactsSQL(parts []deferred, ws, payloads []string) (string, []any) {
	var b strings.Builder
	var args []any
	for i, p := range parts {
		if i == 0 {
			b.WriteString("WITH ")
		} else {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "u%d AS (%s RETURNING 1)", i, shiftParams(p.sql, len(args)))
		args = append(args, p.args...)
	}
	n := len(args)
	fmt.Fprintf(&b, ` INSERT INTO outbox (workspace_id, fact_json, created_at)
		SELECT w, f, $%d FROM unnest($%d::text[], $%d::text[]) WITH ORDINALITY AS x(w, f, n)
		ORDER BY n
		RETURNING id`, n+3, n+1, n+2)
	for i := range parts {
		fmt.Fprintf(&b, ", (SELECT count(*) FROM u%d)", i)
	}
	return b.String(), append(args, ws, payloads, time.Now())
}

var param = regexp.MustCompile(`\$([0-9]+)`)

// shiftParams renumbers sql's placeholders $1… to $(1+by)…; the store's
// statements hold no other dollar sign.
func shiftParams(sql string, by int) string {
	if by == 0 {
		return sql
	}
	return param.ReplaceAllStringFunc(sql, func(m string) string {
		n, _ := strconv.Atoi(m[1:])
		return "$" + strconv.Itoa(n+by)
	})
}

// PendingFacts returns undelivered facts created at or before before, oldest
// first. A row whose JSON cannot be decoded is logged and skipped so it can
// never stall the relay behind it.
func (s *Store) PendingFacts(ctx context.Context, before time.Time, limit int) ([]host.OutboxRow, error) {
	limit = host.ClampLimit(limit, 100, 1000)
	return withPool(ctx, s, func(db querier) ([]host.OutboxRow, error) {
		return queryRows(ctx, db, "pending facts", `SELECT id, fact_json, created_at FROM outbox
			WHERE created_at <= $1
			ORDER BY created_at, id LIMIT $2`, []any{before, limit}, s.facts(ctx, limit))
	})
}

// facts collects outbox rows, logging and skipping undecodable ones.
func (s *Store) facts(ctx context.Context, limit int) func(sqlstore.Rows) ([]host.OutboxRow, error) {
	return sqlstore.Facts(limit, timestamptz, func(id int64, err error) {
		s.log.WarnContext(ctx, "pg: skipping undecodable outbox row", "id", id, "err", err)
	})
}

// timestamptz is the codec of a timestamptz column, read back in UTC.
func timestamptz() (any, func() time.Time) {
	var t time.Time
	return &t, func() time.Time { return t.UTC() }
}

// MarkPublished deletes the outbox rows the relay delivered: the outbox
// holds only facts not yet delivered (migration 00015).
func (s *Store) MarkPublished(ctx context.Context, ids []int64) error {
	if len(ids) == 0 {
		_, err := s.db()
		return err
	}
	_, err := withPool(ctx, s, func(db querier) (struct{}, error) {
		_, err := db.Exec(ctx, `DELETE FROM outbox WHERE id = ANY($1)`, ids)
		return struct{}{}, classify("mark published", err)
	})
	return err
}
