package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io"
	"io/fs"
	"log/slog"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"

	"github.com/ensemble-dev/ensemble/internal/migrations"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// newProvider builds a goose provider over the embedded migrations. The
// global registry is disabled so nothing outside this package can inject
// migrations, and the provider owns no state beyond this call. outOfOrder
// is for databases translated from the old numbering (migrate_renumber.go).
func newProvider(db *sql.DB, outOfOrder bool) (*goose.Provider, error) {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	p, err := goose.NewProvider(database.DialectSQLite3, db, sub,
		goose.WithDisableGlobalRegistry(true), goose.WithAllowOutofOrder(outOfOrder))
	if err != nil {
		return nil, fmt.Errorf("sqlite: migrations: %w", err)
	}
	return p, nil
}

func migrateUp(ctx context.Context, db *sql.DB, log *slog.Logger) error {
	translated, err := sharedNumbering(ctx, db)
	if err != nil {
		return err
	}
	p, err := newProvider(db, translated)
	if err != nil {
		return err
	}
	results, err := p.Up(ctx)
	if err != nil {
		return classify("migrate up", err)
	}
	for _, r := range results {
		log.InfoContext(ctx, "sqlite: applied migration", "version", r.Source.Version,
			"file", r.Source.Path, "duration", r.Duration)
	}
	return nil
}

// hasPending reports whether any embedded migration is not yet applied. A
// database without goose's version table has never been migrated; checking
// for it first keeps this probe from creating the table itself.
func hasPending(ctx context.Context, db *sql.DB) (bool, error) {
	migrated, err := hasVersionTable(ctx, db)
	if err != nil || !migrated {
		return !migrated, err
	}
	p, err := newProvider(db, true)
	if err != nil {
		return false, err
	}
	pending, err := p.HasPending(ctx)
	if err != nil {
		return false, classify("migration status", err)
	}
	return pending, nil
}

func hasVersionTable(ctx context.Context, db *sql.DB) (bool, error) {
	var n int
	err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master
		WHERE type = 'table' AND name = ?`, goose.DefaultTablename).Scan(&n)
	if err != nil {
		return false, classify("migration status", err)
	}
	return n > 0, nil
}

// MigrateUp applies every pending migration to the database at path
// (creating the file if needed). It backs `ensemble migrate up`.
func MigrateUp(ctx context.Context, path string) error {
	db, err := openWriter(ctx, path)
	if err != nil {
		return err
	}
	defer db.Close()
	return migrateUp(ctx, db, slog.Default())
}

// MigrateStatus writes one line per known migration to w: version, file,
// and whether (and when) it was applied. It backs `ensemble migrate status`.
func MigrateStatus(ctx context.Context, path string, w io.Writer) error {
	db, err := openWriter(ctx, path)
	if err != nil {
		return err
	}
	defer db.Close()
	p, err := newProvider(db, true)
	if err != nil {
		return err
	}
	migrated, err := hasVersionTable(ctx, db)
	if err != nil {
		return err
	}
	status, err := migrations.Status(ctx, p, migrated)
	if err != nil {
		return classify("migration status", err)
	}
	return migrations.Write(w, status)
}
