package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

var (
	_ host.LeaseStore = (*Store)(nil)
	_ host.LeaseTx    = (*tx)(nil)
)

// readLease reads one lease through q; found is false when none exists.
func readLease(ctx context.Context, q querier, ws, sid string, now time.Time) (host.SessionLease, bool, error) {
	l := host.SessionLease{WorkspaceID: ws, SessionID: sid}
	var exp int64
	err := q.QueryRowContext(ctx, `SELECT owner, generation, expires_at FROM session_leases
		WHERE workspace_id = ? AND session_id = ?`, ws, sid).Scan(&l.Owner, &l.Generation, &exp)
	if errors.Is(err, sql.ErrNoRows) {
		return l, false, nil
	}
	if err != nil {
		return l, false, classify("read lease", err)
	}
	l.ExpiresAt = fromMS(exp)
	l.Live = exp > ms(now)
	return l, true, nil
}

// AcquireLease implements host.LeaseStore in one write transaction.
func (s *Store) AcquireLease(ctx context.Context, ws, sid, owner string, ttl time.Duration) (host.SessionLease, error) {
	var out host.SessionLease
	err := s.Update(ctx, func(htx host.Tx) error {
		t := htx.(*tx)
		now := time.Now()
		cur, found, err := readLease(ctx, t.tx, ws, sid, now)
		if err != nil {
			return err
		}
		if found && cur.Live && cur.Owner != owner {
			out = cur
			return nil
		}
		next := host.SessionLease{WorkspaceID: ws, SessionID: sid, Owner: owner, Generation: 1,
			ExpiresAt: fromMS(ms(now.Add(ttl))), Live: true}
		if found {
			next.Generation = cur.Generation
			if cur.Owner != owner {
				next.Generation++
				next.TookOver = cur.Owner
			}
		}
		_, err = t.tx.ExecContext(ctx, `INSERT INTO session_leases (workspace_id, session_id, owner, generation, expires_at)
			VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (workspace_id, session_id) DO UPDATE SET
				owner = excluded.owner, generation = excluded.generation, expires_at = excluded.expires_at`,
			ws, sid, owner, next.Generation, ms(next.ExpiresAt))
		if err != nil {
			return classify("acquire lease", err)
		}
		out = next
		return nil
	})
	return out, err
}

// RenewLease implements host.LeaseStore.
func (s *Store) RenewLease(ctx context.Context, ws, sid, owner string, gen int64, ttl time.Duration) error {
	return s.setExpiry(ctx, ws, sid, owner, gen, ms(time.Now().Add(ttl)), true)
}

// ReleaseLease implements host.LeaseStore.
func (s *Store) ReleaseLease(ctx context.Context, ws, sid, owner string, gen int64) error {
	return s.setExpiry(ctx, ws, sid, owner, gen, 0, false)
}

func (s *Store) setExpiry(ctx context.Context, ws, sid, owner string, gen, at int64, mustHold bool) error {
	w, err := s.writer()
	if err != nil {
		return err
	}
	res, err := w.ExecContext(ctx, `UPDATE session_leases SET expires_at = ?
		WHERE workspace_id = ? AND session_id = ? AND owner = ? AND generation = ?`, at, ws, sid, owner, gen)
	if err != nil {
		return classify("lease", err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 && mustHold {
		return fmt.Errorf("sqlite: renew lease %s/%s: %w", ws, sid, host.ErrLeaseLost)
	}
	return nil
}

// GetLease implements host.LeaseStore.
func (s *Store) GetLease(ctx context.Context, ws, sid string) (host.SessionLease, error) {
	r, err := s.reader()
	if err != nil {
		return host.SessionLease{}, err
	}
	l, found, err := readLease(ctx, r, ws, sid, time.Now())
	if err == nil && !found {
		err = fmt.Errorf("sqlite: lease %s/%s: %w", ws, sid, host.ErrNotFound)
	}
	return l, err
}

// CheckLease implements host.LeaseTx: the fence inside a write.
func (t *tx) CheckLease(ctx context.Context, ws, sid, owner string, gen int64) error {
	l, found, err := readLease(ctx, t.tx, ws, sid, time.Now())
	if err != nil {
		return err
	}
	if !found || l.Owner != owner || l.Generation != gen {
		return fmt.Errorf("sqlite: lease %s/%s: %w", ws, sid, host.ErrLeaseLost)
	}
	return nil
}
