package pg

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

var _ host.OutboxClaimer = (*Store)(nil)

// ClaimFacts leases up to limit unpublished rows created at or before
// before, oldest first, to the caller for lease. Rows another replica holds
// a live lease on are skipped, and FOR UPDATE SKIP LOCKED keeps two
// concurrent claims from even waiting on each other. The lease is measured
// on the database clock, so replicas' clocks need not agree. A row whose
// JSON cannot be decoded is logged and skipped (it stays claimed until its
// lease ends, then is skipped again), so it never stalls the relay.
func (s *Store) ClaimFacts(ctx context.Context, before time.Time, limit int, lease time.Duration) ([]host.OutboxRow, error) {
	limit = host.ClampLimit(limit, 100, 1000)
	return withPool(ctx, s, func(db querier) ([]host.OutboxRow, error) {
		out, err := queryRows(ctx, db, "claim facts", `UPDATE outbox o
			SET claimed_until = now() + make_interval(secs => $3)
			FROM (SELECT id FROM outbox
				WHERE created_at <= $1
				  AND (claimed_until IS NULL OR claimed_until < now())
				ORDER BY created_at, id LIMIT $2
				FOR UPDATE SKIP LOCKED) c
			WHERE o.id = c.id
			RETURNING o.id, o.fact_json, o.created_at`,
			[]any{before, limit, lease.Seconds()}, s.facts(ctx, limit))
		// RETURNING has no order; the relay publishes oldest first. Stable:
		// the facts of one row keep their order.
		slices.SortStableFunc(out, func(a, b host.OutboxRow) int {
			if c := a.At.Compare(b.At); c != 0 {
				return c
			}
			return cmp.Compare(a.ID, b.ID)
		})
		return out, err
	})
}
