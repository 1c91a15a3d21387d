package sqlite

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/internal/sqlstore"
)

// AppendFacts writes facts to the outbox inside the caller's transaction, so
// they become durable exactly when the state they describe does.
func (t *tx) AppendFacts(ctx context.Context, facts ...host.Fact) ([]int64, error) {
	rows, err := sqlstore.FactRows(facts)
	if err != nil {
		return nil, fmt.Errorf("sqlite: append facts: %w", err)
	}
	now := ms(time.Now())
	rowIDs := make([]int64, 0, len(rows))
	for _, r := range rows {
		res, err := t.tx.ExecContext(ctx, insertFactSQL, r.WorkspaceID, r.JSON, now)
		if err != nil {
			return nil, classify("append fact", err)
		}
		id, err := res.LastInsertId()
		if err != nil {
			return nil, classify("append fact", err)
		}
		rowIDs = append(rowIDs, id)
	}
	return sqlstore.FactIDs(rows, rowIDs), nil
}

const insertFactSQL = `INSERT INTO outbox (workspace_id, fact_json, created_at) VALUES (?, ?, ?)`

// PendingFacts returns undelivered facts created at or before before, oldest
// first: in id order, which is commit order (one writer), so no index is
// kept on the outbox beside its key (migration 00016; the table holds only
// what is not delivered yet). A row whose JSON cannot be decoded is logged
// and skipped so it can never stall the relay behind it.
func (s *Store) PendingFacts(ctx context.Context, before time.Time, limit int) ([]host.OutboxRow, error) {
	r, err := s.reader()
	if err != nil {
		return nil, err
	}
	limit = host.ClampLimit(limit, 100, 1000)
	return queryRows(ctx, r, "pending facts", `SELECT id, fact_json, created_at FROM outbox
		WHERE created_at <= ?
		ORDER BY id`, []any{ms(before)}, sqlstore.Facts(limit, unixMS, func(id int64, err error) {
		s.log.WarnContext(ctx, "sqlite: skipping undecodable outbox row", "id", id, "err", err)
	}))
}

// unixMS is the codec of a unix-millisecond time column.
func unixMS() (any, func() time.Time) {
	var n int64
	return &n, func() time.Time { return fromMS(n) }
}

// markBatch bounds the rows one statement deletes. The relay marks every
// row the fast path delivered, hundreds a second, and each statement holds
// the one writer the output commits wait for: short statements let them in
// between.
const markBatch = 100

// MarkPublished deletes the outbox rows the relay delivered: the outbox
// holds only facts not yet delivered (migration 00015).
func (s *Store) MarkPublished(ctx context.Context, ids []int64) error {
	w, err := s.writer()
	if err != nil {
		return err
	}
	for len(ids) > 0 {
		n := min(len(ids), markBatch)
		args := make([]any, n)
		for i, id := range ids[:n] {
			args[i] = id
		}
		q := `DELETE FROM outbox WHERE id IN (?` + strings.Repeat(", ?", n-1) + `)`
		if _, err := w.ExecContext(ctx, q, args...); err != nil {
			return classify("mark published", err)
		}
		s.marks.Add(1)
		ids = ids[n:]
	}
	return nil
}
