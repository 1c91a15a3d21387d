package sqlite

import (
	"context"
	"sync"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// relayClaims is the SQLite store's share of the relay and retention ports
// (host.OutboxClaimer, host.PurgeLocker). A SQLite file is served by one
// process, so the claims and the purge lock live in this Store value: they
// keep several Hosts sharing it (tests, tools) from relaying a missed fact
// twice or purging concurrently, with the same contract as PostgreSQL.
type relayClaims struct {
	mu      sync.Mutex
	until   map[int64]time.Time // outbox id -> claim end
	purging sync.Mutex
}

// ClaimFacts is PendingFacts with a lease: rows claimed by another caller
// whose lease has not ended are skipped.
func (s *Store) ClaimFacts(ctx context.Context, before time.Time, limit int, lease time.Duration) ([]host.OutboxRow, error) {
	limit = host.ClampLimit(limit, 100, 1000)
	// Read past rows others hold so a claimed prefix cannot starve us.
	rows, err := s.PendingFacts(ctx, before, 1000)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	s.relay.mu.Lock()
	defer s.relay.mu.Unlock()
	if s.relay.until == nil {
		s.relay.until = map[int64]time.Time{}
	}
	for id, end := range s.relay.until {
		if !end.After(now) {
			delete(s.relay.until, id)
		}
	}
	// The facts of one row share its id and come together: a row is
	// claimed, and counted against limit, at its first fact.
	out := rows[:0]
	var claimed, prev int64
	n := 0 // rows claimed
	for _, r := range rows {
		if r.ID != prev {
			prev, claimed = r.ID, 0
			if n >= limit {
				break
			}
			if _, held := s.relay.until[r.ID]; held {
				continue
			}
			s.relay.until[r.ID] = now.Add(lease)
			claimed = r.ID
			n++
		}
		if r.ID == claimed {
			out = append(out, r)
		}
	}
	return out, nil
}

// TryPurgeLock lets one retention pass at a time run on this store.
func (s *Store) TryPurgeLock(ctx context.Context) (func(), bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	if !s.relay.purging.TryLock() {
		return nil, false, nil
	}
	return s.relay.purging.Unlock, true, nil
}
