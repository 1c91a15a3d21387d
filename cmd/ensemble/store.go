package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/pg"
	"github.com/ensemble-dev/ensemble/sqlite"
)

// storeChoice is the canonical store --database-url selects: embedded
// SQLite (the default) or PostgreSQL.
type storeChoice struct {
	postgres bool
	// path is the SQLite file; url the PostgreSQL connection URL.
	path, url string
}

// selectStore reads --database-url: empty or sqlite://PATH is embedded
// SQLite (in the data dir by default), postgres:// or postgresql:// is
// PostgreSQL. Anything else is refused without echoing credentials.
func selectStore(dbURL, dataDir string) (storeChoice, error) {
	if isPostgresURL(dbURL) {
		return storeChoice{postgres: true, url: dbURL}, nil
	}
	path, err := sqlitePath(dbURL, dataDir)
	return storeChoice{path: path}, err
}

func isPostgresURL(u string) bool {
	return strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://")
}

// String names the store for messages, without credentials.
func (c storeChoice) String() string {
	if c.postgres {
		return "PostgreSQL " + pg.Redact(c.url)
	}
	return "SQLite " + c.path
}

// openStore opens the selected store, applying pending migrations unless
// noMigrate (then pending migrations are an error naming `ensemble migrate up`).
func openStore(ctx context.Context, c storeChoice, noMigrate bool, log *slog.Logger) (host.Store, error) {
	if c.postgres {
		return pg.Open(ctx, c.url, pg.Options{NoMigrate: noMigrate, Logger: log})
	}
	return sqlite.Open(ctx, c.path, sqlite.Options{NoMigrate: noMigrate, Logger: log})
}

// migrateStore applies (up) or shows (status) the selected store's migrations.
func migrateStore(ctx context.Context, c storeChoice, up bool, stdout io.Writer) error {
	switch {
	case c.postgres && up:
		if err := pg.MigrateUp(ctx, c.url); err != nil {
			return err
		}
	case c.postgres:
		return pg.MigrateStatus(ctx, c.url, stdout)
	case up:
		if err := os.MkdirAll(filepath.Dir(c.path), 0o700); err != nil {
			return err
		}
		if err := sqlite.MigrateUp(ctx, c.path); err != nil {
			return err
		}
	default:
		return sqlite.MigrateStatus(ctx, c.path, stdout)
	}
	fmt.Fprintln(stdout, "migrations applied to", c)
	return nil
}

// sqlitePath resolves the embedded database file from --database-url and
// --data-dir. It refuses every URL that does not name SQLite.
func sqlitePath(dbURL, dataDir string) (string, error) {
	switch {
	case dbURL == "":
		return filepath.Join(dataDir, "ensemble.db"), nil
	case strings.HasPrefix(dbURL, "sqlite://"):
		return strings.TrimPrefix(dbURL, "sqlite://"), nil
	case isPostgresURL(dbURL):
		return "", fmt.Errorf("%s is a PostgreSQL URL, not a SQLite file", redactURL(dbURL))
	}
	return "", fmt.Errorf("unsupported --database-url %q: use postgres://…, sqlite://PATH, or leave it empty for embedded SQLite", redactURL(dbURL))
}

// redactURL drops credentials before a URL is shown.
func redactURL(u string) string {
	if at := strings.LastIndex(u, "@"); at >= 0 {
		if scheme := strings.Index(u, "://"); scheme >= 0 && scheme < at {
			return u[:scheme+3] + "…@" + u[at+1:]
		}
	}
	return u
}
