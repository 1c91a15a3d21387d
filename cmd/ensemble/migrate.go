package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
)

// migrate applies or shows the schema migrations of the configured store.
func migrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("migrate", "Apply (up) or show (status) the schema migrations:\n  ensemble migrate [flags] up|status", stderr)
	dataDir := f.string("data-dir", "ENSEMBLE_DATA_DIR", "./ensemble-data", "directory of the embedded SQLite database")
	dbURL := f.string("database-url", "ENSEMBLE_DATABASE_URL", "", "canonical store: empty for embedded SQLite in the data dir, sqlite://PATH, or postgres://…")
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
	store, err := selectStore(*dbURL, *dataDir)
	if err != nil {
		return err
	}
	return migrateStore(ctx, store, f.Arg(0) == "up", stdout)
}
