package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/internal/sqlstore/sqlstoretest"
	"github.com/ensemble-dev/ensemble/runtime/acp"
	"github.com/ensemble-dev/ensemble/runtime/sim"
)

// A database created by the first migration set, holding data written
// under it, is upgraded to the newest schema by Open: every record survives
// and reads back through the store, the Host serves the old session, and
// the newest schema's behaviour works on old rows (published outbox rows
// older than an hour are pruned when the relay marks newer ones).
func TestUpgradeFromFirstMigration(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "v1.db")
	db, err := openWriter(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := newProvider(db, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 1); err != nil {
		t.Fatalf("migrate to version 1: %v", err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	t0 := now.Add(-3 * time.Hour).UnixMilli()
	writeV1Rows(t, db, t0, now)
	db.Close()

	st := openUpgraded(t, path)

	pending := sqlstoretest.CheckFirstSchemaRows(t, st, now)

	// The Host recovers the old unsettled turn and serves the old session.
	rt := acp.New(acp.Config{Name: sim.Name, Simulated: true, Dial: sim.Dial(sim.Options{Rate: -1})})
	defer rt.Shutdown(context.Background())
	sqlstoretest.CheckHostServesFirstSchema(t, host.New(host.Config{Store: st, Runtime: rt}))

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

// writeV1Rows writes rows exactly as the first schema's store wrote them: a
// session with one settled and one unsettled turn, their claims and
// messages, and outbox rows published at t0, published a minute before now
// and pending. Every later schema accepts them unchanged.
func writeV1Rows(t *testing.T, db *sql.DB, t0 int64, now time.Time) {
	t.Helper()
	ctx := t.Context()
	for _, q := range []string{
		`INSERT INTO sessions (workspace_id, id, root_id, title, agent, simulated, settings_json,
			message_version, turn_count, active_turn_id, created_by, created_at, updated_at)
			VALUES ('w', 's', 's', 'old session', 'sim', 1, '{"model":"m"}', 3, 2, 't2', 'alice', ?1, ?1)`,
		`INSERT INTO turns (workspace_id, session_id, id, seq, origin, phase, outcome,
			provider_session_id, provider_turn_id, client_submit_id, submitted_by, created_at, updated_at, settled_at)
			VALUES ('w', 's', 't1', 1, 'user', 'settled', 'completed', 'ps', 'pt1', 'c1', 'alice', ?1, ?1, ?1)`,
		`INSERT INTO turns (workspace_id, session_id, id, seq, origin, phase, provider_session_id,
			client_submit_id, submitted_by, created_at, updated_at)
			VALUES ('w', 's', 't2', 2, 'user', 'dispatched', 'ps', 'c2', 'alice', ?1, ?1)`,
		`INSERT INTO submit_claims (workspace_id, client_submit_id, session_id, turn_id, digest, content_json, state, created_at, updated_at)
			VALUES ('w', 'c1', 's', 't1', 'd1', '{"text":"first"}', 'accepted', ?1, ?1),
			       ('w', 'c2', 's', 't2', 'd2', '{"text":"second"}', 'prepared', ?1, ?1)`,
		`INSERT INTO messages (workspace_id, session_id, id, turn_id, role, kind, version, ordinal, content_json, author, created_at, updated_at)
			VALUES ('w', 's', 't1.prompt', 't1', 'user', 'text', 1, 1, '{"text":"first"}', 'alice', ?1, ?1),
			       ('w', 's', 't1.text-1', 't1', 'agent', 'text', 2, 2, '{"text":"answer"}', '', ?1, ?1),
			       ('w', 's', 't2.prompt', 't2', 'user', 'text', 3, 3, '{"text":"second"}', 'alice', ?1, ?1)`,
		`INSERT INTO outbox (workspace_id, fact_json, created_at, published_at)
			VALUES ('w', '{"workspace":"w","kind":"session/changed","sessionId":"s"}', ?1, ?1),
			       ('w', '{"workspace":"w","kind":"session/changed","sessionId":"s"}', ?2, ?2),
			       ('w', '{"workspace":"w","kind":"transcript/advanced","sessionId":"s","version":3}', ?2, NULL)`,
	} {
		if _, err := db.ExecContext(ctx, q, t0, now.Add(-time.Minute).UnixMilli()); err != nil {
			t.Fatalf("write v1 data: %v\n%s", err, q)
		}
	}
}

// openUpgraded opens the database at path with the current code, which
// applies every pending migration, and checks nothing is left pending.
func openUpgraded(t *testing.T, path string) *Store {
	t.Helper()
	st, err := Open(t.Context(), path, Options{})
	if err != nil {
		t.Fatalf("Open (upgrade): %v", err)
	}
	t.Cleanup(func() { st.Close() })
	if pending, err := hasPending(t.Context(), st.w); err != nil || pending {
		t.Fatalf("after the upgrade: pending %v, %v", pending, err)
	}
	return st
}
