package sqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite" // the "sqlite" driver, to read the schema back

	"github.com/ensemble-dev/ensemble/internal/testenv"
	"github.com/ensemble-dev/ensemble/pg"
	"github.com/ensemble-dev/ensemble/sqlite"
)

// dialectOnly lists the facts one store's schema has and the other's lacks
// on purpose. Every entry says why; anything else that differs fails.
var dialectOnly = map[string]string{
	// PostgreSQL relays on several replicas lease outbox rows in the row
	// (00002_outbox_claims); a SQLite file has one process, whose relay
	// keeps its claims in memory (sqlite/relay_claims.go).
	"pg column outbox.claimed_until integer null": "relay claims: in the row on pg, in memory on SQLite",
}

// Both stores, migrated from empty, reach the same logical schema: the same
// tables with the same columns (types normalized to what the stores write:
// text, integer for integers, booleans 0/1 and unix-millisecond times, and
// real), nullability, primary keys and unique indexes.
func TestStoresReachTheSameSchema(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "schema.db")
	if err := sqlite.MigrateUp(ctx, path); err != nil {
		t.Fatalf("sqlite migrate: %v", err)
	}
	lite := sqliteSchema(t, path)

	conn, dbURL := pgSchema(t)
	if err := pg.MigrateUp(ctx, dbURL); err != nil {
		t.Fatalf("pg migrate: %v", err)
	}
	pgFacts := postgresSchema(t, conn)

	seen := map[string]bool{}
	for _, f := range pgFacts {
		seen[f] = true
	}
	for _, f := range lite {
		if !seen["pg "+f] && dialectOnly["sqlite "+f] == "" {
			t.Errorf("only SQLite has: %s", f)
		}
	}
	liteSeen := map[string]bool{}
	for _, f := range lite {
		liteSeen["pg "+f] = true
	}
	for _, f := range pgFacts {
		if !liteSeen[f] && dialectOnly[f] == "" {
			t.Errorf("only PostgreSQL has: %s", strings.TrimPrefix(f, "pg "))
		}
	}
	for f := range dialectOnly {
		if !seen[f] && !liteSeen["pg "+strings.TrimPrefix(f, "sqlite ")] {
			t.Errorf("allow-listed %q is in neither schema; drop it from dialectOnly", f)
		}
	}
	if len(lite) < 50 {
		t.Fatalf("SQLite schema looks empty: %v", lite)
	}
}

func sqliteSchema(t *testing.T, path string) []string {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	q := func(query string, args ...any) [][]any {
		rows, err := db.QueryContext(t.Context(), query, args...)
		if err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		defer rows.Close()
		cols, _ := rows.Columns()
		var out [][]any
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			out = append(out, vals)
		}
		return out
	}
	var facts []string
	for _, tr := range q(`SELECT name FROM sqlite_master WHERE type = 'table'
		AND name NOT LIKE 'sqlite_%' AND name <> 'goose_db_version' ORDER BY name`) {
		table := fmt.Sprint(tr[0])
		facts = append(facts, "table "+table)
		var pk []string
		// cid, name, type, notnull, dflt_value, pk
		for _, c := range q(`SELECT name, type, "notnull", pk FROM pragma_table_info(?) ORDER BY cid`, table) {
			null := "null"
			if c[2].(int64) == 1 || c[3].(int64) > 0 {
				null = "not null"
			}
			facts = append(facts, fmt.Sprintf("column %s.%s %s %s", table, c[0], normType(fmt.Sprint(c[1])), null))
			if c[3].(int64) > 0 {
				pk = append(pk, fmt.Sprintf("%d:%s", c[3], c[0]))
			}
		}
		slices.Sort(pk)
		for i := range pk {
			_, pk[i], _ = strings.Cut(pk[i], ":")
		}
		facts = append(facts, "primary key "+table+"("+strings.Join(pk, ", ")+")")
		// seq, name, unique, origin (c: CREATE INDEX, u: UNIQUE, pk), partial
		for _, ix := range q(`SELECT name, origin, partial FROM pragma_index_list(?) WHERE "unique" = 1 AND origin <> 'pk'`, table) {
			var cols []string
			for _, c := range q(`SELECT name FROM pragma_index_info(?) ORDER BY seqno`, ix[0]) {
				cols = append(cols, fmt.Sprint(c[0]))
			}
			facts = append(facts, uniqueFact(table, cols, ix[2].(int64) == 1))
		}
	}
	slices.Sort(facts)
	return facts
}

func postgresSchema(t *testing.T, conn *pgx.Conn) []string {
	t.Helper()
	ctx := t.Context()
	var facts []string
	collect := func(query string, row func(pgx.Rows) string) {
		rows, err := conn.Query(ctx, query)
		if err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		defer rows.Close()
		for rows.Next() {
			facts = append(facts, "pg "+row(rows))
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	collect(`SELECT table_name FROM information_schema.tables
		WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' AND table_name <> 'goose_db_version'`,
		func(r pgx.Rows) string {
			var name string
			must(t, r.Scan(&name))
			return "table " + name
		})
	collect(`SELECT table_name, column_name, data_type, is_nullable FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name <> 'goose_db_version'`,
		func(r pgx.Rows) string {
			var table, col, typ, nullable string
			must(t, r.Scan(&table, &col, &typ, &nullable))
			null := "null"
			if nullable == "NO" {
				null = "not null"
			}
			return fmt.Sprintf("column %s.%s %s %s", table, col, normType(typ), null)
		})
	// Index columns in key order; indpred marks a partial index.
	collect(`SELECT c.relname, i.indisprimary, i.indpred IS NOT NULL,
			array(SELECT a.attname FROM unnest(i.indkey) WITH ORDINALITY k(n, o)
				JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.n ORDER BY k.o)
		FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
		WHERE c.relnamespace = current_schema()::regnamespace AND i.indisunique AND c.relname <> 'goose_db_version'`,
		func(r pgx.Rows) string {
			var table string
			var primary, partial bool
			var cols []string
			must(t, r.Scan(&table, &primary, &partial, &cols))
			if primary {
				return "primary key " + table + "(" + strings.Join(cols, ", ") + ")"
			}
			return uniqueFact(table, cols, partial)
		})
	slices.Sort(facts)
	return facts
}

func uniqueFact(table string, cols []string, partial bool) string {
	f := "unique " + table + "(" + strings.Join(cols, ", ") + ")"
	if partial {
		f += " partial"
	}
	return f
}

// normType maps a column type to what the stores write into it. SQLite
// keeps booleans as 0/1 and times as unix milliseconds in INTEGER columns,
// which PostgreSQL keeps as boolean and timestamptz.
func normType(typ string) string {
	switch strings.ToLower(typ) {
	case "text", "character varying", "jsonb", "json":
		return "text"
	case "integer", "bigint", "smallint", "boolean", "timestamp with time zone":
		return "integer"
	case "real", "double precision":
		return "real"
	case "blob", "bytea":
		return "blob"
	}
	return "?" + typ
}

// pgSchema creates an empty schema for this test and returns an admin
// connection using it and a URL whose connections do.
func pgSchema(t *testing.T) (*pgx.Conn, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, testenv.PostgresURL())
	if err != nil {
		testenv.Missing(t, "PostgreSQL", err)
	}
	schema := fmt.Sprintf("ens_schema_%d", time.Now().UnixNano())
	if _, err := conn.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = conn.Exec(context.Background(), `DROP SCHEMA `+schema+` CASCADE`)
		_ = conn.Close(context.Background())
	})
	if _, err := conn.Exec(ctx, `SET search_path = `+schema); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(testenv.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	v := u.Query()
	v.Set("search_path", schema)
	u.RawQuery = v.Encode()
	return conn, u.String()
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Both dialects number and name their migrations alike (pg is the
// reference; a migration one dialect does not need is a no-op there), so a
// version means the same change on either store.
func TestMigrationsShareNumbersAndNames(t *testing.T) {
	names := func(dir string) []string {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range entries {
			out = append(out, e.Name())
		}
		return out
	}
	pgFiles, liteFiles := names("../../pg/migrations"), names("../../sqlite/migrations")
	if !slices.Equal(pgFiles, liteFiles) || len(pgFiles) == 0 {
		t.Fatalf("migration files differ:\n pg     %v\n sqlite %v", pgFiles, liteFiles)
	}
}
