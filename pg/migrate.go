package pg

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"

	"github.com/pressly/goose/v3/lock"

	"github.com/ensemble-dev/ensemble/internal/migrations"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// newProvider builds a goose provider over the embedded migrations. goose
// needs database/sql, so migrations (and only they) go through pgx's stdlib
// adapter on the same pool. The global registry is disabled so nothing
// outside this package can inject migrations. A PostgreSQL advisory lock
// serializes replicas that start at the same time: one applies the
// migrations, the others wait and find nothing pending.
//
// The lock is the schema's, not the database's: goose's default is one id
// for the whole database, so deployments (or tests) in different schemas
// of one database queued behind each other's migrations, each waiter
// polling every 5 s, for no reason: their tables do not overlap.
func newProvider(ctx context.Context, db *sql.DB) (*goose.Provider, error) {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var schema sql.NullString
	if err := db.QueryRowContext(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return nil, classify("migrations: schema", err)
	}
	// Probe every second for up to five minutes (goose's default total).
	locker, err := lock.NewPostgresSessionLocker(
		lock.WithLockID(migrationLockID(schema.String)), lock.WithLockTimeout(1, 300))
	if err != nil {
		return nil, fmt.Errorf("pg: migrations: %w", err)
	}
	p, err := goose.NewProvider(database.DialectPostgres, db, sub,
		goose.WithDisableGlobalRegistry(true), goose.WithSessionLocker(locker))
	if err != nil {
		return nil, fmt.Errorf("pg: migrations: %w", err)
	}
	return p, nil
}

// migrationLockID is the advisory lock id that serializes migrations of
// one schema (the first on the connection's search_path, where goose puts
// its table and the migrations their tables).
func migrationLockID(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("ensemble migrations\x00" + schema))
	return int64(h.Sum64())
}

func migrateUp(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) error {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	p, err := newProvider(ctx, db)
	if err != nil {
		return err
	}
	results, err := p.Up(ctx)
	if err != nil {
		return classify("migrate up", err)
	}
	for _, r := range results {
		log.InfoContext(ctx, "pg: applied migration", "version", r.Source.Version,
			"file", r.Source.Path, "duration", r.Duration)
	}
	return nil
}

// hasPending reports whether any embedded migration is not yet applied. A
// database without goose's version table has never been migrated; checking
// for it first keeps this probe from creating the table itself.
func hasPending(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	migrated, err := hasVersionTable(ctx, pool)
	if err != nil || !migrated {
		return !migrated, err
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	p, err := newProvider(ctx, db)
	if err != nil {
		return false, err
	}
	pending, err := p.HasPending(ctx)
	if err != nil {
		return false, classify("migration status", err)
	}
	return pending, nil
}

// hasVersionTable looks goose's table up on the connection's search_path,
// where goose creates it.
func hasVersionTable(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	var found bool
	err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, goose.DefaultTablename).Scan(&found)
	if err != nil {
		return false, classify("migration status", err)
	}
	return found, nil
}

func openForMigrations(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := poolConfig(url)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, classify("open", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, classify("connect", err)
	}
	return pool, nil
}

// MigrateUp applies every pending migration to the database at url. It
// backs `ensemble migrate up`.
func MigrateUp(ctx context.Context, url string) error {
	pool, err := openForMigrations(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	return migrateUp(ctx, pool, slog.Default())
}

// MigrateStatus writes one line per known migration to w: version, file,
// and whether (and when) it was applied. It backs `ensemble migrate status`.
func MigrateStatus(ctx context.Context, url string, w io.Writer) error {
	pool, err := openForMigrations(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	p, err := newProvider(ctx, db)
	if err != nil {
		return err
	}
	migrated, err := hasVersionTable(ctx, pool)
	if err != nil {
		return err
	}
	status, err := migrations.Status(ctx, p, migrated)
	if err != nil {
		return classify("migration status", err)
	}
	return migrations.Write(w, status)
}
