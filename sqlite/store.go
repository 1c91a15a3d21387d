// Package sqlite is the canonical store on embedded SQLite (modernc.org/sqlite,
// no cgo): the zero-config, single-node default behind host.Store.
package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"runtime"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/internal/sqlstore"
)

// Options tune Open.
type Options struct {
	// NoMigrate refuses to apply pending migrations; Open fails instead and
	// names the command that applies them.
	NoMigrate bool
	// Logger receives migration and decode warnings. Nil discards them.
	Logger *slog.Logger

	// checkpointEvery overrides checkpointEvery (checkpoint.go); negative
	// runs no background checkpointer, for tests that need the WAL left
	// alone.
	checkpointEvery time.Duration
}

// Store implements host.Store on one SQLite database file.
//
// Writes go through a single-connection pool so our own writers queue in
// database/sql instead of contending for SQLite's lock, and concurrent
// Update calls share one write transaction (groupcommit.go); every write
// transaction starts with BEGIN IMMEDIATE, so a writer in another process
// waits on busy_timeout rather than deadlocking on a read-to-write upgrade.
// Reads use a separate multi-connection, query-only pool and, under WAL,
// never wait for the writer.
type Store struct {
	w      *sql.DB
	r      *sql.DB
	log    *slog.Logger
	closed atomic.Bool
	relay  relayClaims // relay_claims.go
	// hot holds the statements of an output transaction, prepared once on
	// the writer's connection (prepared.go).
	hot map[string]*sql.Stmt
	// ckpt checkpoints the WAL in the background (checkpoint.go); nil
	// only in tests.
	ckpt *checkpointer
	// gc lets concurrent Update calls share one write transaction
	// (groupcommit.go).
	gc groupCommit
	// marks counts MarkPublished's statements, each bounded to markBatch
	// rows (outbox.go; tests read it).
	marks atomic.Int64
}

var _ host.Store = (*Store)(nil)

// busyTimeout is how long a statement waits for a lock held by another
// connection or process before reporting host.ErrUnavailable.
const busyTimeout = 5 * time.Second

// Open opens (creating if needed) the database at path and, unless
// opts.NoMigrate, applies pending migrations.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w, err := openWriter(ctx, path)
	if err != nil {
		return nil, err
	}
	if opts.NoMigrate {
		pending, err := hasPending(ctx, w)
		if err != nil {
			w.Close()
			return nil, err
		}
		if pending {
			w.Close()
			return nil, fmt.Errorf("sqlite: database %s has pending migrations; run `ensemble migrate up` first", path)
		}
	} else if err := migrateUp(ctx, w, log); err != nil {
		w.Close()
		return nil, err
	}
	r, err := openReader(ctx, path)
	if err != nil {
		w.Close()
		return nil, err
	}
	st := &Store{w: w, r: r, log: log}
	if every := cmp.Or(opts.checkpointEvery, checkpointEvery); every > 0 {
		if st.ckpt, err = openCheckpointer(ctx, path, every, log); err != nil {
			st.Close()
			return nil, err
		}
	}
	if st.hot, err = prepareHot(ctx, w); err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}

// dsn builds a driver DSN. Pragmas are set per connection by the driver, so
// every pooled connection gets them, not just the first.
func dsn(path string, extra url.Values) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "synchronous(NORMAL)")
	for k, vs := range extra {
		for _, v := range vs {
			q.Add(k, v)
		}
	}
	return path + "?" + q.Encode()
}

// openWriter opens the single writer connection. Its commits never
// checkpoint the WAL (wal_autocheckpoint=0): the store's checkpointer does
// that from its own connection (checkpoint.go).
func openWriter(ctx context.Context, path string) (*sql.DB, error) {
	// Opening the connection switches the file to WAL before any reader
	// attaches.
	return openSingle(ctx, path, url.Values{
		"_pragma": {"journal_mode(WAL)", "wal_autocheckpoint(0)"},
		"_txlock": {"immediate"},
	})
}

// openSingle opens a pool of exactly one connection that is never closed
// for idleness, and opens that connection now.
func openSingle(ctx context.Context, path string, extra url.Values) (*sql.DB, error) {
	db, err := sql.Open("sqlite", dsn(path, extra))
	if err != nil {
		return nil, classify("open", err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxIdleTime(0)
	db.SetConnMaxLifetime(0)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, classify("open "+path, err)
	}
	return db, nil
}

func openReader(ctx context.Context, path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", dsn(path, url.Values{"_query_only": {"1"}}))
	if err != nil {
		return nil, classify("open", err)
	}
	n := max(4, runtime.GOMAXPROCS(0))
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, classify("open "+path, err)
	}
	return db, nil
}

// Close closes both pools. It is safe to call more than once.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	var errs []error
	if s.ckpt != nil {
		errs = append(errs, s.ckpt.close())
	}
	for _, stmt := range s.hot {
		errs = append(errs, stmt.Close())
	}
	return errors.Join(append(errs, s.r.Close(), s.w.Close())...)
}

// reader returns the read pool, or errClosed after Close.
func (s *Store) reader() (*sql.DB, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	return s.r, nil
}

func (s *Store) writer() (*sql.DB, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	return s.w, nil
}

// tx implements host.Tx over one write transaction.
type tx struct {
	tx preparedTx
	s  *Store
}

var _ host.Tx = (*tx)(nil)

// querier is what both a pool and a transaction offer, so each read is
// written once and used from Store (read pool) and Tx (own writes visible).
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// scanner is a *sql.Row or *sql.Rows.
type scanner = sqlstore.Scanner

// ms stores a time as unix milliseconds; the zero time round-trips.
func ms(t time.Time) int64 { return t.UnixMilli() }

func fromMS(v int64) time.Time { return time.UnixMilli(v).UTC() }

func msPtr(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UnixMilli()
}

func fromMSPtr(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromMS(v.Int64)
	return &t
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// Ping checks both pools answer; a closed store is unavailable.
func (s *Store) Ping(ctx context.Context) error {
	if s.closed.Load() {
		return fmt.Errorf("sqlite: %w", host.ErrUnavailable)
	}
	for _, db := range []*sql.DB{s.w, s.r} {
		if err := db.PingContext(ctx); err != nil {
			return fmt.Errorf("sqlite: ping: %v: %w", err, host.ErrUnavailable)
		}
	}
	return nil
}
