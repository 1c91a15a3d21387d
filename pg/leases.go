package pg

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/internal/sqlstore"
)

var (
	_ host.LeaseStore = (*Store)(nil)
	_ host.LeaseTx    = (*tx)(nil)
)

const leaseCols = `owner, generation, expires_at, expires_at > now()`

func scanLease(row sqlstore.Scanner, ws, sid string) (host.SessionLease, bool, error) {
	l := host.SessionLease{WorkspaceID: ws, SessionID: sid}
	err := row.Scan(&l.Owner, &l.Generation, &l.ExpiresAt, &l.Live)
	if errors.Is(err, pgx.ErrNoRows) {
		return l, false, nil
	}
	if err != nil {
		return l, false, classify("read lease", err)
	}
	l.ExpiresAt = utc(l.ExpiresAt)
	// A placeholder row (see AcquireLease) is no lease.
	return l, l.Owner != "", nil
}

// AcquireLease implements host.LeaseStore: one transaction that locks the
// lease row (created as an expired placeholder if missing), so concurrent
// acquirers on several replicas are serialized and exactly one wins. The
// lock is FOR UPDATE, which is also what makes a takeover wait for the old
// owner's fenced writes (CheckLease's key-share lock).
func (s *Store) AcquireLease(ctx context.Context, ws, sid, owner string, ttl time.Duration) (host.SessionLease, error) {
	var out host.SessionLease
	err := s.Update(ctx, func(htx host.Tx) error {
		t := htx.(*tx)
		if _, err := t.tx.Exec(ctx, `INSERT INTO session_leases (workspace_id, session_id, owner, generation, expires_at)
			VALUES ($1, $2, '', 0, to_timestamp(0)) ON CONFLICT DO NOTHING`, ws, sid); err != nil {
			return t.fail(classify("acquire lease", err))
		}
		cur, found, err := scanLease(t.tx.QueryRow(ctx, `SELECT `+leaseCols+` FROM session_leases
			WHERE workspace_id = $1 AND session_id = $2 FOR UPDATE`, ws, sid), ws, sid)
		if err != nil {
			return t.fail(err)
		}
		if found && cur.Live && cur.Owner != owner {
			out = cur
			return nil
		}
		next := host.SessionLease{WorkspaceID: ws, SessionID: sid, Owner: owner, Generation: cur.Generation, Live: true}
		if cur.Owner != owner {
			next.Generation++
			next.TookOver = cur.Owner // "" for a placeholder
		}
		err = t.tx.QueryRow(ctx, `UPDATE session_leases
			SET owner = $3, generation = $4, expires_at = now() + make_interval(secs => $5)
			WHERE workspace_id = $1 AND session_id = $2 RETURNING expires_at`,
			ws, sid, owner, next.Generation, ttl.Seconds()).Scan(&next.ExpiresAt)
		if err != nil {
			return t.fail(classify("acquire lease", err))
		}
		next.ExpiresAt = utc(next.ExpiresAt)
		out = next
		return nil
	})
	return out, err
}

// RenewLease implements host.LeaseStore.
func (s *Store) RenewLease(ctx context.Context, ws, sid, owner string, gen int64, ttl time.Duration) error {
	n, err := withPool(ctx, s, func(db querier) (int64, error) {
		tag, err := db.Exec(ctx, `UPDATE session_leases SET expires_at = now() + make_interval(secs => $5)
			WHERE workspace_id = $1 AND session_id = $2 AND owner = $3 AND generation = $4`,
			ws, sid, owner, gen, ttl.Seconds())
		return tag.RowsAffected(), classify("renew lease", err)
	})
	if err == nil && n == 0 {
		return fmt.Errorf("pg: renew lease %s/%s: %w", ws, sid, host.ErrLeaseLost)
	}
	return err
}

// ReleaseLease implements host.LeaseStore.
func (s *Store) ReleaseLease(ctx context.Context, ws, sid, owner string, gen int64) error {
	_, err := withPool(ctx, s, func(db querier) (struct{}, error) {
		_, err := db.Exec(ctx, `UPDATE session_leases SET expires_at = to_timestamp(0)
			WHERE workspace_id = $1 AND session_id = $2 AND owner = $3 AND generation = $4`, ws, sid, owner, gen)
		return struct{}{}, classify("release lease", err)
	})
	return err
}

// GetLease implements host.LeaseStore.
func (s *Store) GetLease(ctx context.Context, ws, sid string) (host.SessionLease, error) {
	type res struct {
		l     host.SessionLease
		found bool
	}
	r, err := withPool(ctx, s, func(db querier) (res, error) {
		l, found, err := scanLease(db.QueryRow(ctx, `SELECT `+leaseCols+` FROM session_leases
			WHERE workspace_id = $1 AND session_id = $2`, ws, sid), ws, sid)
		return res{l, found}, err
	})
	if err == nil && !r.found {
		err = fmt.Errorf("pg: lease %s/%s: %w", ws, sid, host.ErrNotFound)
	}
	return r.l, err
}

// CheckLease implements host.LeaseTx: the fence inside a write. It takes a
// key-share lock on the lease row so a takeover (AcquireLease locks the row
// FOR UPDATE) cannot commit between the check and this transaction's
// commit. Key share, not share: the owner's renewal and release change only
// the expiry, a non-key column, so they neither wait for the session's
// open writes nor, while waiting, queue every next write of the session
// behind them (with FOR SHARE each renewal stalled the session's output
// for a commit or two).
func (t *tx) CheckLease(ctx context.Context, ws, sid, owner string, gen int64) error {
	if t.failed != nil {
		return t.failed
	}
	// Sent with the next statement (the fenced Turn read) or with COMMIT:
	// a fence costs no round trip of its own. The server refuses the
	// transaction when the lease is not this owner's (checkLeaseSQL).
	t.tx.queue(deferred{op: "check lease " + ws + "/" + sid, sql: checkLeaseSQL, args: []any{ws, sid, owner, gen}})
	return nil
}

var checkLeaseSQL = fenceRows(`SELECT 1 FROM session_leases
	WHERE workspace_id = $1 AND session_id = $2 AND owner = $3 AND generation = $4
	FOR KEY SHARE`, codeFenceLease)
