package sqlite

import (
	"database/sql"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/internal/sqlstore/sqlstoretest"
)

// oldNumbering lists the SQLite migrations in the order and numbering they
// shipped with before the renumbering: old version i+1 is oldNumbering[i].
// Their text is unchanged since (migrations are never edited once shipped),
// so oldMigrations builds the old set from today's files by name.
var oldNumbering = []string{"init", "interactions", "session_leases", "outbox_prune",
	"output_appends", "session_context_lost", "labels", "message_parts", "queue",
	"goals", "tombstones", "lineage"}

// oldMigrations is the old SQLite migration set as it shipped, each file
// under its old number.
func oldMigrations(t *testing.T) fstest.MapFS {
	t.Helper()
	current, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]string{}
	for _, e := range current {
		_, name := splitMigration(t, e.Name())
		byName[name] = e.Name()
	}
	old := fstest.MapFS{}
	for i, name := range oldNumbering {
		data, err := fs.ReadFile(migrationFiles, "migrations/"+byName[name])
		if err != nil {
			t.Fatalf("old migration %d %s: %v", i+1, name, err)
		}
		old[fmt.Sprintf("%05d_%s.sql", i+1, name)] = &fstest.MapFile{Data: data}
	}
	return old
}

// A database migrated with the old SQLite numbering (oldMigrations) is
// opened by the current code: its
// recorded versions are translated, the rest of the migrations apply, and
// the result has exactly the schema of a database created today, with its
// rows intact. upTo covers the complete old set, a database stopped right
// after the old 00002_interactions (which the old order ran before
// session_leases and outbox_prune, so they apply out of order), and one
// that only ran init.
func TestUpgradeFromOldNumbering(t *testing.T) {
	want := schemaOf(t, freshDatabase(t))
	for _, upTo := range []int64{12, 2, 1} {
		t.Run(strconvI(upTo), func(t *testing.T) {
			ctx := t.Context()
			path := filepath.Join(t.TempDir(), "old.db")
			db, err := openWriter(ctx, path)
			if err != nil {
				t.Fatal(err)
			}
			old, err := goose.NewProvider(database.DialectSQLite3, db, oldMigrations(t),
				goose.WithDisableGlobalRegistry(true))
			if err != nil {
				t.Fatal(err)
			}
			// Rows written under the first schema, carried forward by the
			// old migrations as a user's database was.
			if _, err := old.UpTo(ctx, 1); err != nil {
				t.Fatalf("old migration 1: %v", err)
			}
			now := time.Now().UTC().Truncate(time.Millisecond)
			writeV1Rows(t, db, now.Add(-3*time.Hour).UnixMilli(), now)
			if _, err := old.UpTo(ctx, upTo); err != nil {
				t.Fatalf("old migrations up to %d: %v", upTo, err)
			}
			db.Close()

			st := openUpgraded(t, path)
			if got := appliedVersions(t, st.w); !slices.Equal(got, allVersions(t)) {
				t.Fatalf("recorded versions after the upgrade: %v", got)
			}
			var numbering int
			if err := st.w.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&numbering); err != nil || numbering != numberingTranslated {
				t.Fatalf("user_version %d, %v; want %d", numbering, err, numberingTranslated)
			}
			if got := schemaOf(t, st.w); !slices.Equal(got, want) {
				t.Fatalf("schema after the upgrade differs from a new database's:\n got %q\nwant %q", got, want)
			}
			sqlstoretest.CheckFirstSchemaRows(t, st, now)
			turns, err := st.ListTurns(ctx, "w", "s", host.TurnQuery{})
			if err != nil || len(turns.Turns) != 2 || turns.Turns[1].Outcome != host.OutcomeCompleted {
				t.Fatalf("turns after upgrade: %+v %v", turns, err)
			}
			st.Close()

			// Opening again finds nothing to translate or apply.
			st2, err := Open(ctx, path, Options{NoMigrate: true})
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			if got := appliedVersions(t, st2.w); !slices.Equal(got, allVersions(t)) {
				t.Fatalf("recorded versions after reopening: %v", got)
			}
			st2.Close()
		})
	}
}

// A database created today is marked with the shared numbering, so it is
// never mistaken for an old one.
func TestNewDatabaseUsesSharedNumbering(t *testing.T) {
	db := freshDatabase(t)
	var numbering int
	if err := db.QueryRowContext(t.Context(), `PRAGMA user_version`).Scan(&numbering); err != nil || numbering != numberingShared {
		t.Fatalf("user_version %d, %v; want %d", numbering, err, numberingShared)
	}
	if got := appliedVersions(t, db); !slices.Equal(got, allVersions(t)) {
		t.Fatalf("recorded versions: %v", got)
	}
}

func TestLegacyVersion(t *testing.T) {
	// old file -> its shared number, by name
	for old, shared := range map[int64]int64{1: 1, 2: 5, 3: 3, 4: 4, 5: 6, 6: 7, 7: 8, 8: 9, 9: 10, 10: 11, 11: 12, 12: 13} {
		if got := legacyVersion(old); got != shared {
			t.Errorf("legacyVersion(%d) = %d, want %d", old, got, shared)
		}
	}
	current, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	names := map[int64]string{}
	for _, e := range current {
		v, name := splitMigration(t, e.Name())
		names[v] = name
	}
	for i, name := range oldNumbering {
		v := int64(i + 1)
		if got := names[legacyVersion(v)]; got != name {
			t.Errorf("old %d %s maps to version %d, which is %q", v, name, legacyVersion(v), got)
		}
	}
}

func splitMigration(t *testing.T, file string) (int64, string) {
	t.Helper()
	num, name, ok := strings.Cut(strings.TrimSuffix(file, ".sql"), "_")
	v, err := goose.NumericComponent(file)
	if !ok || err != nil || strings.TrimLeft(num, "0") != strconvI(v) {
		t.Fatalf("migration file %q: %v", file, err)
	}
	return v, name
}

func strconvI(v int64) string { return strconv.FormatInt(v, 10) }

func freshDatabase(t *testing.T) *sql.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "new.db")
	st, err := Open(t.Context(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st.w
}

func appliedVersions(t *testing.T, db *sql.DB) []int64 {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), `SELECT version_id FROM `+goose.DefaultTablename+` WHERE is_applied ORDER BY version_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

// schemaOf lists every table, index and trigger with the SQL that defines
// it, goose's own table aside.
func schemaOf(t *testing.T, db *sql.DB) []string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), `SELECT type, name, coalesce(sql, '') FROM sqlite_master
		WHERE name NOT LIKE 'goose%' AND name NOT LIKE 'sqlite_%' ORDER BY type, name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var typ, name, def string
		if err := rows.Scan(&typ, &name, &def); err != nil {
			t.Fatal(err)
		}
		out = append(out, typ+" "+name+": "+strings.Join(strings.Fields(def), " "))
	}
	return out
}

// allVersions is 0 (goose's own row) and every migration file's version.
func allVersions(t *testing.T) []int64 {
	t.Helper()
	files, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	v := []int64{0}
	for i := range files {
		v = append(v, int64(i+1))
	}
	return v
}
