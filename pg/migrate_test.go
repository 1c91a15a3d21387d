package pg

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3/lock"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/internal/sqlstore/sqlstoretest"
)

// A database created by the first migration set, holding data written
// under it, is upgraded to the newest schema by Open: every record survives
// and reads back through the store, the Host serves the old session, and
// the newest schema's behaviour works on old rows (published outbox rows
// older than an hour are pruned when the relay marks newer ones).
func TestUpgradeFromFirstMigration(t *testing.T) {
	t.Parallel() // waits on WAL flushes mostly; overlaps with the other parallel tests
	ctx := t.Context()
	url, _ := testSchema(t)
	pool, err := openForMigrations(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDBFromPool(pool)
	p, err := newProvider(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 1); err != nil {
		t.Fatalf("migrate to version 1: %v", err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	t0 := now.Add(-3 * time.Hour)
	// Rows exactly as the first schema's store wrote them: a session with
	// one settled and one unsettled turn, their claims and messages, and
	// outbox rows published long ago, published recently and pending.
	for _, q := range []string{
		`INSERT INTO sessions (workspace_id, id, root_id, title, agent, simulated, settings_json,
			message_version, turn_count, active_turn_id, created_by, created_at, updated_at)
			VALUES ('w', 's', 's', 'old session', 'sim', true, '{"model":"m"}', 3, 2, 't2', 'alice', $1, $1)`,
		`INSERT INTO turns (workspace_id, session_id, id, seq, origin, phase, outcome,
			provider_session_id, provider_turn_id, client_submit_id, submitted_by, created_at, updated_at, settled_at)
			VALUES ('w', 's', 't1', 1, 'user', 'settled', 'completed', 'ps', 'pt1', 'c1', 'alice', $1, $1, $1)`,
		`INSERT INTO turns (workspace_id, session_id, id, seq, origin, phase, provider_session_id,
			client_submit_id, submitted_by, created_at, updated_at)
			VALUES ('w', 's', 't2', 2, 'user', 'dispatched', 'ps', 'c2', 'alice', $1, $1)`,
		`INSERT INTO submit_claims (workspace_id, client_submit_id, session_id, turn_id, digest, content_json, state, created_at, updated_at)
			VALUES ('w', 'c1', 's', 't1', 'd1', '{"text":"first"}', 'accepted', $1, $1),
			       ('w', 'c2', 's', 't2', 'd2', '{"text":"second"}', 'prepared', $1, $1)`,
		`INSERT INTO messages (workspace_id, session_id, id, turn_id, role, kind, version, ordinal, content_json, author, created_at, updated_at)
			VALUES ('w', 's', 't1.prompt', 't1', 'user', 'text', 1, 1, '{"text":"first"}', 'alice', $1, $1),
			       ('w', 's', 't1.text-1', 't1', 'agent', 'text', 2, 2, '{"text":"answer"}', '', $1, $1),
			       ('w', 's', 't2.prompt', 't2', 'user', 'text', 3, 3, '{"text":"second"}', 'alice', $1, $1)`,
		`INSERT INTO outbox (workspace_id, fact_json, created_at, published_at)
			VALUES ('w', '{"workspace":"w","kind":"session/changed","sessionId":"s"}', $1, $1),
			       ('w', '{"workspace":"w","kind":"session/changed","sessionId":"s"}', $2, $2),
			       ('w', '{"workspace":"w","kind":"transcript/advanced","sessionId":"s","version":3}', $2, NULL)`,
	} {
		args := []any{t0}
		if strings.Contains(q, "$2") {
			args = append(args, now.Add(-time.Minute))
		}
		if _, err := pool.Exec(ctx, q, args...); err != nil {
			t.Fatalf("write v1 data: %v\n%s", err, q)
		}
	}
	db.Close()
	pool.Close()

	st, err := Open(ctx, url, Options{})
	if err != nil {
		t.Fatalf("Open (upgrade): %v", err)
	}
	defer st.Close()
	if pending, err := hasPending(ctx, st.pool); err != nil || pending {
		t.Fatalf("after the upgrade: pending %v, %v", pending, err)
	}

	pending := sqlstoretest.CheckFirstSchemaRows(t, st, now)

	// The Host recovers the old unsettled turn and serves the old session.
	sqlstoretest.CheckHostServesFirstSchema(t, host.New(host.Config{Store: st, Runtime: newSimRuntime(t, -1), Logger: quietLogger()}))

	// The upgrade deleted the rows published before it (migration 00015;
	// CheckFirstSchemaRows found only the pending one), and marking a row
	// deletes it.
	if err := st.MarkPublished(ctx, []int64{pending.ID}); err != nil {
		t.Fatal(err)
	}
	rows, err := st.PendingFacts(ctx, time.Now(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.ID == pending.ID {
			t.Fatalf("row %d is still pending after it was marked", r.ID)
		}
	}
}

// Migrations of one schema wait for each other; migrations of another
// schema in the same database do not. Before the lock was per schema, a
// replica starting while any other schema migrated (goose's database-wide
// lock, polled every 5 s) waited behind it, up to minutes.
func TestMigrationLockIsPerSchema(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	holder := adminConn(t)

	// Another schema's migration lock, and goose's database-wide default
	// that other goose users take, held for the whole test.
	other := migrationLockID("ens_some_other_schema")
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_lock($1), pg_advisory_lock($2)`, other, lock.DefaultLockID); err != nil {
		t.Fatal(err)
	}
	url, _ := testSchema(t)
	openCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	st, err := Open(openCtx, url, Options{})
	if err != nil {
		t.Fatalf("Open while other schemas' locks are held: %v", err)
	}
	st.Close()

	// This schema's own lock still serializes: with it held, a migration
	// of a fresh schema of the same name waits (and gives up at the
	// deadline) instead of running beside another migrator.
	url2, schema2 := testSchema(t)
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_lock($1)`, migrationLockID(schema2)); err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel2 := context.WithTimeout(ctx, 3*time.Second)
	defer cancel2()
	if st, err := Open(waitCtx, url2, Options{}); err == nil {
		st.Close()
		t.Fatal("Open migrated a schema whose migration lock another session holds")
	}
	var tables int
	if err := holder.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename <> 'goose_db_version'`, schema2).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Fatalf("%d tables created in %s while its migration lock was held elsewhere", tables, schema2)
	}
}
