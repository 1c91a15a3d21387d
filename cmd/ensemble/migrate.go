package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/ensemble-dev/ensemble/sqlite"
)

// migrate applies or shows the schema migrations of the configured store.
func migrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("migrate", "Apply (up) or show (status) the schema migrations:\n  ensemble migrate [flags] up|status", stderr)
	dataDir := f.string("data-dir", "ENSEMBLE_DATA_DIR", "./ensemble-data", "directory of the embedded SQLite database")
	dbURL := f.string("database-url", "ENSEMBLE_DATABASE_URL", "", "database URL (empty: embedded SQLite in the data dir)")
	if err := f.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errHelp
		}
		return err
	}
	if f.NArg() != 1 || (f.Arg(0) != "up" && f.Arg(0) != "status") {
		f.Usage()
		return fmt.Errorf("want exactly one of: up, status")
	}
	path, err := sqlitePath(*dbURL, *dataDir)
	if err != nil {
		return err
	}
	if f.Arg(0) == "up" {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return err
		}
		if err := sqlite.MigrateUp(ctx, path); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "migrations applied to", path)
		return nil
	}
	return sqlite.MigrateStatus(ctx, path, stdout)
}
