package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ensemble-dev/ensemble/internal/testenv"
)

func TestSelectStoreByURL(t *testing.T) {
	c, err := selectStore("", "/data")
	if err != nil || c.postgres || c.path != "/data/ensemble.db" {
		t.Fatalf("default: %+v %v; want SQLite in the data dir", c, err)
	}
	c, err = selectStore("sqlite:///tmp/x.db", "/data")
	if err != nil || c.postgres || c.path != "/tmp/x.db" {
		t.Fatalf("sqlite://: %+v %v", c, err)
	}
	for _, u := range []string{"postgres://u:secret@db/x", "postgresql://u:secret@db/x?sslmode=disable"} {
		c, err = selectStore(u, "/data")
		if err != nil || !c.postgres || c.url != u {
			t.Fatalf("%s: %+v %v; want PostgreSQL", u, c, err)
		}
		if s := c.String(); strings.Contains(s, "secret") || !strings.Contains(s, "PostgreSQL") {
			t.Fatalf("store named as %q: want PostgreSQL without the password", s)
		}
	}
	if _, err := selectStore("mysql://u:secret@db/x", "/data"); err == nil || strings.Contains(err.Error(), "secret") {
		t.Fatalf("an unknown URL is refused without echoing credentials: %v", err)
	}
}

// pgTestURL creates a fresh schema on the test PostgreSQL, drops it when the
// test ends, and returns a URL whose connections use it.
func pgTestURL(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, testenv.PostgresURL())
	if err != nil {
		testenv.Missing(t, "PostgreSQL", err)
	}
	defer admin.Close(context.Background())
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "ens_cmd_" + hex.EncodeToString(b)
	if _, err := admin.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, testenv.PostgresURL()); err == nil {
			_, _ = c.Exec(ctx, `DROP SCHEMA `+schema+` CASCADE`)
			_ = c.Close(ctx)
		}
	})
	u, err := url.Parse(testenv.PostgresURL())
	if err != nil {
		t.Fatalf("ENSEMBLE_TEST_DATABASE_URL must be a URL here: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// `ensemble migrate` and `ensemble serve` select PostgreSQL by URL:
// --no-migrate refuses a fresh database, `migrate up` applies and `status`
// reports the migrations, and a served prompt lands in PostgreSQL.
func TestPostgresMigrateAndServe(t *testing.T) {
	dbURL := pgTestURL(t)
	ctx := t.Context()
	run := func(args ...string) (string, error) {
		var out, errb bytes.Buffer
		err := migrate(ctx, args, &out, &errb)
		return out.String() + errb.String(), err
	}

	out, err := run("--database-url", dbURL, "status")
	if err != nil || !strings.Contains(out, "00001_init.sql") || strings.Contains(out, "applied") {
		t.Fatalf("status of a fresh database: %v\n%s", err, out)
	}
	var errb bytes.Buffer
	err = serve(ctx, []string{"--addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--database-url", dbURL, "--no-migrate"}, &bytes.Buffer{}, &errb)
	if err == nil || !strings.Contains(err.Error(), "ensemble migrate up") {
		t.Fatalf("serve --no-migrate on a fresh database: %v; want a refusal naming `ensemble migrate up`", err)
	}
	if out, err = run("--database-url", dbURL, "up"); err != nil || !strings.Contains(out, "migrations applied to PostgreSQL") {
		t.Fatalf("migrate up: %v\n%s", err, out)
	}
	if out, err = run("--database-url", dbURL, "status"); err != nil || strings.Contains(out, "pending") || !strings.Contains(out, "applied") {
		t.Fatalf("status after up: %v\n%s", err, out)
	}

	p := startServer(t, t.TempDir(), "--database-url", dbURL, "--no-migrate", "--sim-rate", "-1ns")
	var created struct {
		Session struct {
			ID string `json:"id"`
		} `json:"session"`
	}
	if code := p.call(t, http.MethodPost, "/sessions", map[string]any{"content": map[string]any{"text": "hello postgres"}}, &created); code != http.StatusCreated {
		t.Fatalf("session.create: %d", code)
	}
	deadline := time.Now().Add(30 * time.Second)
	for p.turn(t, created.Session.ID).Phase != "settled" {
		if time.Now().After(deadline) {
			t.Fatal("the first turn never settled")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if strings.Contains(p.stderr.String(), "secret") {
		t.Fatal("the database URL's credentials must never be logged")
	}

	c, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var turns, agentMsgs int
	if err := c.QueryRow(ctx, `SELECT count(*) FROM turns WHERE session_id = $1 AND phase = 'settled'`, created.Session.ID).Scan(&turns); err != nil {
		t.Fatal(err)
	}
	if err := c.QueryRow(ctx, `SELECT count(*) FROM messages WHERE session_id = $1 AND role = 'agent'`, created.Session.ID).Scan(&agentMsgs); err != nil {
		t.Fatal(err)
	}
	if turns != 1 || agentMsgs == 0 {
		t.Fatalf("PostgreSQL holds %d settled turns and %d agent messages; want the served turn and its answer", turns, agentMsgs)
	}
}
