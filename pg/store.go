// Package pg is the canonical store on PostgreSQL (github.com/jackc/pgx/v5):
// the store for clusters, where several replicas share one database and
// every race between them is decided by the database: row locks
// (SELECT … FOR UPDATE on the session), unique constraints (submit claims,
// turn seq, provider identity) and transactions that commit a command's
// facts together with its outbox rows.
package pg

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ensemble-dev/ensemble/host"
)

// Options tune Open.
type Options struct {
	// NoMigrate refuses to apply pending migrations; Open fails instead and
	// names the command that applies them.
	NoMigrate bool
	// Logger receives migration, connection-loss and decode warnings. Nil
	// discards them.
	Logger *slog.Logger
	// Tracer, when set, sees every statement (benchmarks count round trips
	// with it). It may also implement pgx.BatchTracer.
	Tracer pgx.QueryTracer
}

// Store implements host.Store on a pgx connection pool.
//
// Every write transaction runs at READ COMMITTED and serializes on the
// session row: Tx.Session takes SELECT … FOR UPDATE, and Tx.Turn locks the
// turn's session before reading the turn, so every command on a session
// takes its locks in one order (session first) and reads the latest
// committed state after the lock is granted.
type Store struct {
	pool   *pgxpool.Pool
	log    *slog.Logger
	closed atomic.Bool
}

var _ host.Store = (*Store)(nil)

// Server-side limits set on every connection. lockTimeout bounds a wait
// for a row lock held by another transaction (as SQLite's busy timeout
// does) and turns it into host.ErrUnavailable; idleInTxTimeout lets the
// server end a transaction whose client stopped talking (a frozen replica)
// so it cannot hold a session's lock forever.
const (
	lockTimeout     = 5 * time.Second
	idleInTxTimeout = 60 * time.Second
)

// commitTimeout bounds COMMIT's round trip, which runs whatever the
// caller's context says (txConn.commit): the deferred writes it carries
// wait at most lockTimeout each for a row lock.
const commitTimeout = 2 * lockTimeout

// Open connects to the database at url (a postgres:// URL; pgx and pgxpool
// parameters such as pool_max_conns or search_path may be given in it) and,
// unless opts.NoMigrate, applies pending migrations.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg, err := poolConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.Tracer = opts.Tracer
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, classify("open", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, classify("connect", err)
	}
	if opts.NoMigrate {
		pending, err := hasPending(ctx, pool)
		if err != nil {
			pool.Close()
			return nil, err
		}
		if pending {
			pool.Close()
			return nil, fmt.Errorf("pg: database %s has pending migrations; run `ensemble migrate up` first", Redact(url))
		}
	} else if err := migrateUp(ctx, pool, log); err != nil {
		pool.Close()
		return nil, err
	}
	return &Store{pool: pool, log: log}, nil
}

func poolConfig(url string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// The parse error may quote the URL, password included.
		return nil, fmt.Errorf("pg: invalid database URL %s", Redact(url))
	}
	if !strings.Contains(url, "pool_max_conns") {
		// pgxpool's default (max(4, CPUs)) is too small here: one submit is
		// several short transactions from different goroutines, and the
		// more of them commit together, the more share one WAL flush.
		cfg.MaxConns = int32(max(8, 4*runtime.GOMAXPROCS(0)))
	}
	rp := cfg.ConnConfig.RuntimeParams
	if _, ok := rp["lock_timeout"]; !ok {
		rp["lock_timeout"] = fmt.Sprint(lockTimeout.Milliseconds())
	}
	if _, ok := rp["idle_in_transaction_session_timeout"]; !ok {
		rp["idle_in_transaction_session_timeout"] = fmt.Sprint(idleInTxTimeout.Milliseconds())
	}
	if _, ok := rp["application_name"]; !ok {
		rp["application_name"] = "ensemble"
	}
	return cfg, nil
}

// Redact drops the password from a database URL before it is shown.
func Redact(url string) string {
	cfg, err := pgconn.ParseConfig(url)
	if err != nil || cfg.Password == "" {
		if err != nil {
			return "(unparseable URL)"
		}
		return url
	}
	return redactPassword(url, cfg.Password)
}

// Close closes the pool. It is safe to call more than once.
func (s *Store) Close() error {
	if !s.closed.Swap(true) {
		s.pool.Close()
	}
	return nil
}

// errClosed is returned by every call after Close.
var errClosed = fmt.Errorf("pg: store closed: %w", host.ErrUnavailable)

func (s *Store) db() (*pgxpool.Pool, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	return s.pool, nil
}

// lost reacts to an error that means the server or the network dropped a
// connection: every pooled connection was probably dropped with it (a
// restart, pg_terminate_backend for the role), so the pool is reset and the
// next command dials afresh instead of failing once per stale connection.
func (s *Store) lost(err error) {
	if isConnLoss(err) && !s.closed.Load() {
		s.log.Warn("pg: connection lost; resetting the pool", "err", err)
		s.pool.Reset()
	}
}

// Ping reports whether the database answers; a closed store is unavailable.
func (s *Store) Ping(ctx context.Context) error {
	pool, err := s.db()
	if err != nil {
		return err
	}
	err = pool.Ping(ctx)
	if err != nil {
		s.lost(err)
		return fmt.Errorf("pg: ping: %v: %w", err, host.ErrUnavailable)
	}
	return nil
}

// Update runs fn in one READ COMMITTED transaction and commits if fn
// returns nil. fn's error is returned unchanged so typed *host.Error values
// pass through, except when a deferred write failed (txconn.go): the Host
// was told that write succeeded, so its failure is what Update returns.
// PostgreSQL aborts a transaction at its first failed statement, so a Tx
// remembers that failure: later calls return it without a round trip, and
// Update rolls back and returns it even if fn ignored it.
func (s *Store) Update(ctx context.Context, fn func(host.Tx) error) (err error) {
	if _, err := s.db(); err != nil {
		return err
	}
	t := &tx{store: s, locked: map[sessionKey]bool{}, seen: map[rowKey]sessionKey{}}
	t.tx = &txConn{t: t}
	// release rolls back whatever did not commit, on a panic too.
	defer t.tx.release()
	if err := fn(t); err != nil {
		if t.late != nil {
			return t.late
		}
		return err
	}
	if t.failed != nil {
		return t.failed
	}
	return t.tx.commit(ctx)
}

type sessionKey struct{ ws, id string }

// rowKey names a turn or a claim this transaction read or inserted.
type rowKey struct{ table, ws, id string }

// tx implements host.Tx over one transaction on one connection.
type tx struct {
	store *Store
	tx    *txConn
	// locked holds the sessions this transaction has locked FOR UPDATE.
	locked map[sessionKey]bool
	// seen maps the turns and claims this transaction read or inserted to
	// the session they belong to (see defersUpdate).
	seen map[rowKey]sessionKey
	// failed is the first statement failure; the server has aborted the
	// transaction, so every later call returns it.
	failed error
	// late is the failure of a deferred write, if one failed.
	late error
	// ahead is the session row read with its lock by the last Turn read.
	ahead *sessionAhead
	// queueAhead is the queue state read with the last Turn's interactions.
	queueAhead *queueAhead
	// probeAhead is the settlement probe sent ahead (SettleAhead).
	probeAhead *probeAhead
	// probeWanted is a SettleAhead made before the session's lock: the
	// probe follows the lock statement when it is queued.
	probeWanted *probeAhead
}

var _ host.Tx = (*tx)(nil)

// fail records a statement failure (not a missing row or a refusal decided
// here) and returns it.
func (t *tx) fail(err error) error {
	if t.failed == nil {
		t.failed = err
	}
	return err
}

// querier is what both the pool and a transaction offer, so each read is
// written once and used from Store (pool) and Tx (own writes visible).
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// withPool runs one statement outside a transaction, retrying once when the
// pooled connection turned out dead before the statement was sent.
func withPool[T any](ctx context.Context, s *Store, fn func(q querier) (T, error)) (T, error) {
	pool, err := s.db()
	if err != nil {
		var zero T
		return zero, err
	}
	v, err := fn(pool)
	if err != nil && pgconn.SafeToRetry(err) && ctx.Err() == nil {
		s.lost(err)
		v, err = fn(pool)
	}
	if err != nil {
		s.lost(err)
	}
	return v, err
}

// withSnapshot runs fn in one read-only REPEATABLE READ transaction, so
// all of its reads see one snapshot; retried like withPool.
func withSnapshot[T any](ctx context.Context, s *Store, fn func(q querier) (T, error)) (T, error) {
	return withPool(ctx, s, func(querier) (T, error) {
		var zero T
		rtx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		if err != nil {
			return zero, classify("begin read", err)
		}
		defer func() { _ = rtx.Rollback(context.WithoutCancel(ctx)) }()
		v, err := fn(rtx)
		if err != nil {
			return zero, err
		}
		if err := rtx.Commit(ctx); err != nil {
			return zero, classify("end read", err)
		}
		return v, nil
	})
}

// utc returns t in UTC; pgx decodes timestamptz in the local zone.
func utc(t time.Time) time.Time { return t.UTC() }

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// defersUpdate reports whether an UPDATE of the row k may be deferred to
// the next round trip: its "no row matched" answer can only be "one row"
// when the row is the transaction's own session, locked FOR UPDATE, or a
// turn or claim this transaction read or inserted while holding its
// session's lock. Turns and claims are deleted only with their session,
// under that lock (DeleteProvisionalSession, PurgeSessions), and a delete
// in this transaction drops the lock from t.locked, so such an UPDATE
// cannot miss its row before commit. Any other UPDATE runs at once, so its
// host.ErrNotFound reaches the caller inside the transaction as before.
func (t *tx) defersUpdate(k rowKey) bool {
	if k.table == "sessions" {
		return t.locked[sessionKey{k.ws, k.id}]
	}
	s, ok := t.seen[k]
	return ok && t.locked[s]
}

// see records a turn or claim row read or inserted in this transaction.
func (t *tx) see(table, ws, id, sessionID string) {
	t.seen[rowKey{table, ws, id}] = sessionKey{ws, sessionID}
}

// updateOne runs an UPDATE that must match the one row k. When
// defersUpdate allows, the Host only returns its error, so it goes with the
// next round trip (txconn.go), its rows-affected check kept as a guard;
// otherwise it runs now and "no row matched" is host.ErrNotFound.
func (t *tx) updateOne(ctx context.Context, k rowKey, op, sql string, args ...any) error {
	if t.defersUpdate(k) {
		t.tx.queue(deferred{op: op, sql: sql, args: args, late: true, row: &k,
			check: func(tag pgconn.CommandTag) error { return t.affectedOne(op, tag, nil) }})
		return nil
	}
	tag, err := t.tx.Exec(ctx, sql, args...)
	return t.affectedOne(op, tag, err)
}
