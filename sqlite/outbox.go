package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// AppendFacts writes facts to the outbox inside the caller's transaction, so
// they become durable exactly when the state they describe does.
func (t *tx) AppendFacts(ctx context.Context, facts ...host.Fact) ([]int64, error) {
	now := ms(time.Now())
	ids := make([]int64, 0, len(facts))
	for _, f := range facts {
		b, err := json.Marshal(f)
		if err != nil {
			return nil, fmt.Errorf("sqlite: append fact: %w", err)
		}
		res, err := t.tx.ExecContext(ctx, `INSERT INTO outbox (workspace_id, fact_json, created_at)
			VALUES (?, ?, ?)`, f.WorkspaceID, string(b), now)
		if err != nil {
			return nil, classify("append fact", err)
		}
		id, err := res.LastInsertId()
		if err != nil {
			return nil, classify("append fact", err)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// PendingFacts returns unpublished facts created at or before before, oldest
// first. A row whose JSON cannot be decoded is logged and skipped so it can
// never stall the relay behind it.
func (s *Store) PendingFacts(ctx context.Context, before time.Time, limit int) ([]host.OutboxRow, error) {
	r, err := s.reader()
	if err != nil {
		return nil, err
	}
	limit = clampLimit(limit, 100, 1000)
	rows, err := r.QueryContext(ctx, `SELECT id, fact_json, created_at FROM outbox
		WHERE published_at IS NULL AND created_at <= ?
		ORDER BY created_at, id`, ms(before))
	if err != nil {
		return nil, classify("pending facts", err)
	}
	defer rows.Close()
	out := []host.OutboxRow{}
	for len(out) < limit && rows.Next() {
		var (
			row     host.OutboxRow
			payload string
			at      int64
		)
		if err := rows.Scan(&row.ID, &payload, &at); err != nil {
			return nil, classify("pending facts", err)
		}
		if err := json.Unmarshal([]byte(payload), &row.Fact); err != nil {
			s.log.WarnContext(ctx, "sqlite: skipping undecodable outbox row", "id", row.ID, "err", err)
			continue
		}
		row.At = fromMS(at)
		out = append(out, row)
	}
	if err := rows.Err(); err != nil {
		return nil, classify("pending facts", err)
	}
	return out, nil
}

// markBatch bounds the number of bound parameters per statement.
const markBatch = 500

// MarkPublished records that the relay delivered these outbox rows.
func (s *Store) MarkPublished(ctx context.Context, ids []int64) error {
	w, err := s.writer()
	if err != nil {
		return err
	}
	now := ms(time.Now())
	for len(ids) > 0 {
		n := min(len(ids), markBatch)
		args := make([]any, 0, n+1)
		args = append(args, now)
		for _, id := range ids[:n] {
			args = append(args, id)
		}
		q := `UPDATE outbox SET published_at = ? WHERE published_at IS NULL AND id IN (?` +
			strings.Repeat(", ?", n-1) + `)`
		if _, err := w.ExecContext(ctx, q, args...); err != nil {
			return classify("mark published", err)
		}
		ids = ids[n:]
	}
	return nil
}
