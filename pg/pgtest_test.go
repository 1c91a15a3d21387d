package pg

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ensemble-dev/ensemble/internal/testenv"
)

// adminConn connects to the test server outside any store, or skips (fails
// with ENSEMBLE_REQUIRE_SERVICES=1) when PostgreSQL is unreachable.
func adminConn(t testing.TB) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, testenv.PostgresURL())
	if err != nil {
		testenv.Missing(t, "PostgreSQL", err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// testSchema creates a uniquely named, empty schema, drops it when the test
// ends, and returns a database URL whose connections use it (search_path)
// and carry its name (application_name), so a test can find and terminate
// exactly its own backends.
func testSchema(t testing.TB) (dbURL, schema string) {
	t.Helper()
	admin := adminConn(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema = "ens_test_" + hex.EncodeToString(b)
	if _, err := admin.Exec(t.Context(), `CREATE SCHEMA `+schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, testenv.PostgresURL())
		if err != nil {
			t.Logf("drop schema %s: %v", schema, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, `DROP SCHEMA `+schema+` CASCADE`); err != nil {
			t.Logf("drop schema %s: %v", schema, err)
		}
	})
	return withParams(testenv.PostgresURL(), map[string]string{
		"search_path": schema, "application_name": schema,
	}), schema
}

// withParams adds connection parameters to a URL or keyword/value string.
func withParams(dsn string, params map[string]string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err == nil {
			q := u.Query()
			for k, v := range params {
				q.Set(k, v)
			}
			u.RawQuery = q.Encode()
			return u.String()
		}
	}
	for k, v := range params {
		dsn += " " + k + "=" + v
	}
	return dsn
}

// openTest opens a migrated store on url and closes it when the test ends.
func openTest(t testing.TB, url string, opts Options) *Store {
	t.Helper()
	st, err := Open(context.Background(), url, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// terminate ends every backend of the schema's connections from a separate
// admin connection, as an operator (or a failover) would, and returns how
// many it ended.
func terminate(t testing.TB, schema string) int {
	t.Helper()
	admin := adminConn(t)
	var n int
	err := admin.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid))
		FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()`, schema).Scan(&n)
	if err != nil {
		t.Fatalf("pg_terminate_backend: %v", err)
	}
	return n
}

// quietLogger discards logs unless ENSEMBLE_TEST_LOG is set.
func quietLogger() *slog.Logger {
	if os.Getenv("ENSEMBLE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}
