package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/host/storetest"
)

func openTemp(t testing.TB) *Store {
	t.Helper()
	st, err := Open(t.Context(), filepath.Join(t.TempDir(), "ensemble.db"), Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestStoreContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) host.Store { return openTemp(t) })
}

func TestOpenNoMigrateOnEmptyFileFails(t *testing.T) {
	path := filepath.Join(t.TempDir(), "empty.db")
	_, err := Open(t.Context(), path, Options{NoMigrate: true})
	if err == nil || !strings.Contains(err.Error(), "ensemble migrate up") {
		t.Fatalf("Open(NoMigrate) on an empty file: %v; want an error naming `ensemble migrate up`", err)
	}
	// The refusal must not have half-migrated the file.
	var buf bytes.Buffer
	if err := MigrateStatus(t.Context(), path, &buf); err != nil {
		t.Fatalf("MigrateStatus: %v", err)
	}
	if !strings.Contains(buf.String(), "pending") || strings.Contains(buf.String(), "applied") {
		t.Fatalf("status after refused open:\n%s", buf.String())
	}
}

func TestMigrateUpThenOpenNoMigrate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.db")
	if err := MigrateUp(t.Context(), path); err != nil {
		t.Fatalf("MigrateUp: %v", err)
	}
	if err := MigrateUp(t.Context(), path); err != nil {
		t.Fatalf("MigrateUp again: %v", err)
	}
	var buf bytes.Buffer
	if err := MigrateStatus(t.Context(), path, &buf); err != nil {
		t.Fatalf("MigrateStatus: %v", err)
	}
	out := buf.String()
	if !strings.Contains(out, "00001") || !strings.Contains(out, "00001_init.sql") ||
		!strings.Contains(out, "applied") || strings.Contains(out, "pending") {
		t.Fatalf("status after MigrateUp:\n%s", out)
	}
	st, err := Open(t.Context(), path, Options{NoMigrate: true})
	if err != nil {
		t.Fatalf("Open(NoMigrate) after MigrateUp: %v", err)
	}
	st.Close()
	// Open with migrations on an up-to-date file is a no-op.
	st, err = Open(t.Context(), path, Options{})
	if err != nil {
		t.Fatalf("Open after MigrateUp: %v", err)
	}
	st.Close()
}

func TestPragmas(t *testing.T) {
	st := openTemp(t)
	check := func(db *sql.DB, pragma, want string) {
		t.Helper()
		var got string
		if err := db.QueryRowContext(t.Context(), "PRAGMA "+pragma).Scan(&got); err != nil {
			t.Fatalf("PRAGMA %s: %v", pragma, err)
		}
		if got != want {
			t.Fatalf("PRAGMA %s = %s, want %s", pragma, got, want)
		}
	}
	for _, db := range []*sql.DB{st.w, st.r} {
		check(db, "journal_mode", "wal")
		check(db, "busy_timeout", "5000")
		check(db, "foreign_keys", "1")
		check(db, "synchronous", "1") // NORMAL
	}
	check(st.r, "query_only", "1")
}

// A corrupt row must come back as a quarantine candidate, not fail the scan
// or hide the healthy turns beside it.
func TestUnsettledTurnsQuarantinesCorruptRows(t *testing.T) {
	st := openTemp(t)
	ctx := t.Context()
	now := time.UnixMilli(1_750_000_000_000).UTC()
	err := st.Update(ctx, func(tx host.Tx) error {
		if err := tx.InsertSession(ctx, host.Session{WorkspaceID: "w", ID: "s", RootID: "s", CreatedAt: now, UpdatedAt: now}); err != nil {
			return err
		}
		for i, id := range []string{"good", "bad-phase", "bad-seq"} {
			if err := tx.InsertTurn(ctx, host.Turn{WorkspaceID: "w", SessionID: "s", ID: id, Seq: int64(i + 1),
				Phase: host.PhaseDispatched, CreatedAt: now, UpdatedAt: now}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, st, `UPDATE turns SET phase = 'exploded' WHERE id = 'bad-phase'`)
	mustExec(t, st, `UPDATE turns SET seq = 'not a number' WHERE id = 'bad-seq'`)

	turns, bad, err := st.UnsettledTurns(ctx)
	if err != nil {
		t.Fatalf("UnsettledTurns: %v", err)
	}
	if len(turns) != 1 || turns[0].ID != "good" {
		t.Fatalf("healthy turns = %+v, want only 'good'", turns)
	}
	if len(bad) != 2 {
		t.Fatalf("quarantine candidates = %+v, want 2", bad)
	}
	keys := map[string]string{}
	for _, q := range bad {
		if q.WorkspaceID != "w" || q.Kind != "turn" || q.Reason == "" {
			t.Fatalf("bad candidate %+v", q)
		}
		keys[q.Key] = q.Reason
	}
	if !strings.Contains(keys["w/s/bad-phase"], "exploded") || !strings.Contains(keys["w/s/bad-seq"], "seq") {
		t.Fatalf("candidate keys/reasons = %v", keys)
	}

	// Once quarantined, the scan skips them.
	for _, q := range bad {
		if err := st.Quarantine(ctx, q); err != nil {
			t.Fatalf("Quarantine: %v", err)
		}
	}
	turns, bad, err = st.UnsettledTurns(ctx)
	if err != nil || len(turns) != 1 || len(bad) != 0 {
		t.Fatalf("after quarantine: %d turns, %d bad, err %v; want 1, 0, nil", len(turns), len(bad), err)
	}
}

func mustExec(t *testing.T, st *Store, q string) {
	t.Helper()
	if _, err := st.w.ExecContext(t.Context(), q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// Under WAL a reader never waits for an open write transaction.
func TestReadsDoNotBlockBehindWrites(t *testing.T) {
	st := openTemp(t)
	ctx := t.Context()
	now := time.UnixMilli(1_750_000_000_000).UTC()
	if err := st.Update(ctx, func(tx host.Tx) error {
		return tx.InsertSession(ctx, host.Session{WorkspaceID: "w", ID: "s", RootID: "s", CreatedAt: now, UpdatedAt: now})
	}); err != nil {
		t.Fatal(err)
	}
	holding, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- st.Update(ctx, func(tx host.Tx) error {
			s, err := tx.Session(ctx, "w", "s")
			if err != nil {
				return err
			}
			s.Title = "changed"
			if err := tx.UpdateSession(ctx, s); err != nil {
				return err
			}
			close(holding)
			<-release
			return nil
		})
	}()
	<-holding
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := st.GetSession(rctx, "w", "s")
	if err != nil {
		t.Fatalf("read during write: %v", err)
	}
	if s.Title != "" {
		t.Fatalf("read saw uncommitted title %q", s.Title)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("writer: %v", err)
	}
	if s, _ := st.GetSession(ctx, "w", "s"); s.Title != "changed" {
		t.Fatalf("committed title not visible: %q", s.Title)
	}
}

// A write lock held by another process (here: another connection) turns
// into host.ErrUnavailable once busy_timeout passes.
func TestBusyIsUnavailable(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the 5s busy timeout")
	}
	path := filepath.Join(t.TempDir(), "busy.db")
	st, err := Open(t.Context(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	other, err := openWriter(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	lock, err := other.BeginTx(t.Context(), nil) // BEGIN IMMEDIATE: holds the write lock
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback()

	start := time.Now()
	err = st.Update(t.Context(), func(tx host.Tx) error { return nil })
	if !errors.Is(err, host.ErrUnavailable) {
		t.Fatalf("Update while another writer holds the lock: %v; want ErrUnavailable", err)
	}
	if waited := time.Since(start); waited < 4*time.Second {
		t.Fatalf("gave up after %v, before the busy timeout", waited)
	}
}

func TestUpdatePanicReleasesWriter(t *testing.T) {
	st := openTemp(t)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("panic not propagated")
			}
		}()
		_ = st.Update(t.Context(), func(tx host.Tx) error { panic("boom") })
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if err := st.Update(ctx, func(tx host.Tx) error { return nil }); err != nil {
		t.Fatalf("Update after a panicking Update: %v", err)
	}
}

// Turns and messages must belong to an existing session; the check runs at
// commit so a command may write them in any order.
func TestForeignKeysDeferredToCommit(t *testing.T) {
	st := openTemp(t)
	ctx := t.Context()
	now := time.UnixMilli(1_750_000_000_000).UTC()
	turn := host.Turn{WorkspaceID: "w", SessionID: "s", ID: "t", Seq: 1, Phase: host.PhaseQueued, CreatedAt: now, UpdatedAt: now}
	if err := st.Update(ctx, func(tx host.Tx) error { return tx.InsertTurn(ctx, turn) }); err == nil {
		t.Fatal("orphan turn committed")
	}
	err := st.Update(ctx, func(tx host.Tx) error {
		if err := tx.InsertTurn(ctx, turn); err != nil {
			return err
		}
		return tx.InsertSession(ctx, host.Session{WorkspaceID: "w", ID: "s", RootID: "s", CreatedAt: now, UpdatedAt: now})
	})
	if err != nil {
		t.Fatalf("turn before session in one tx: %v", err)
	}
}

func TestBadSessionCursor(t *testing.T) {
	st := openTemp(t)
	_, err := st.ListSessions(t.Context(), "w", host.SessionQuery{Cursor: "%%%"})
	if host.CodeOf(err) != host.CodeInvalidInput {
		t.Fatalf("bad cursor: %v; want invalid_input", err)
	}
}

// BenchmarkOutputCommit: go test ./sqlite -run '^$' -bench OutputCommit
func BenchmarkOutputCommit(b *testing.B) {
	storetest.BenchOutput(b, func(b *testing.B) host.Store { return openTemp(b) })
}
