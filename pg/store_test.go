package pg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/host/storetest"
)

func TestStoreContract(t *testing.T) {
	t.Parallel() // waits on WAL flushes mostly; overlaps with the other parallel tests
	url, _ := testSchema(t)
	storetest.Run(t, func(t *testing.T) host.Store { return openTest(t, url, Options{}) })
}

func fixedTime() time.Time { return time.UnixMilli(1_750_000_000_000).UTC() }

func seedSession(t *testing.T, st *Store, ws, id string) {
	t.Helper()
	now := fixedTime()
	err := st.Update(t.Context(), func(tx host.Tx) error {
		return tx.InsertSession(t.Context(), host.Session{WorkspaceID: ws, ID: id, RootID: id, CreatedAt: now, UpdatedAt: now})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A command that starts from a Turn (acceptance, output) and one that starts
// from the session (cancel, settle) lock in the same order, session first,
// so they queue instead of deadlocking. Here A reads and updates the turn,
// then reads the session; B reads the session, then updates the turn. If
// Tx.Turn did not lock the session, B would take the session while A holds
// the turn and PostgreSQL would abort one of them as a deadlock.
func TestTurnAndSessionCommandsLockInOneOrder(t *testing.T) {
	url, _ := testSchema(t)
	st := openTest(t, url, Options{})
	ctx := t.Context()
	now := fixedTime()
	seedSession(t, st, "w", "s")
	tu := host.Turn{WorkspaceID: "w", SessionID: "s", ID: "t", Seq: 1, Phase: host.PhaseDispatched, CreatedAt: now, UpdatedAt: now}
	if err := st.Update(ctx, func(tx host.Tx) error { return tx.InsertTurn(ctx, tu) }); err != nil {
		t.Fatal(err)
	}

	aHasTurn, bHasSession := make(chan struct{}), make(chan struct{})
	errs := make(chan error, 2)
	go func() {
		errs <- st.Update(ctx, func(tx host.Tx) error {
			cur, err := tx.Turn(ctx, "w", "s", "t")
			if err != nil {
				return err
			}
			cur.Phase = host.PhaseDurablyAccepted
			if err := tx.UpdateTurn(ctx, cur); err != nil {
				return err
			}
			close(aHasTurn)
			// Give B the chance to take the session lock, if it can.
			select {
			case <-bHasSession:
			case <-time.After(300 * time.Millisecond):
			}
			_, err = tx.Session(ctx, "w", "s")
			return err
		})
	}()
	<-aHasTurn
	go func() {
		errs <- st.Update(ctx, func(tx host.Tx) error {
			if _, err := tx.Session(ctx, "w", "s"); err != nil {
				return err
			}
			close(bHasSession)
			cur, err := tx.Turn(ctx, "w", "s", "t")
			if err != nil {
				return err
			}
			cur.CancelRequested = true
			return tx.UpdateTurn(ctx, cur)
		})
	}()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent turn- and session-first commands: %v", err)
		}
	}
	got, err := st.GetTurn(ctx, "w", "s", "t")
	if err != nil || got.Phase != host.PhaseDurablyAccepted || !got.CancelRequested {
		t.Fatalf("turn = %+v %v; want both writes (B saw A's commit after waiting)", got, err)
	}
}

// PostgreSQL aborts a transaction at its first failed statement. A Tx
// remembers the failure: later calls return it, and Update rolls back and
// returns it even when fn ignores it, so nothing of the transaction commits.
func TestFailedStatementFailsTheTransaction(t *testing.T) {
	url, _ := testSchema(t)
	st := openTest(t, url, Options{})
	ctx := t.Context()
	now := fixedTime()
	seedSession(t, st, "w", "s")
	bound := host.Turn{WorkspaceID: "w", SessionID: "s", ID: "t1", Seq: 1, Phase: host.PhaseDurablyAccepted,
		ProviderSessionID: "ps", ProviderTurnID: "pt", CreatedAt: now, UpdatedAt: now}
	other := host.Turn{WorkspaceID: "w", SessionID: "s", ID: "t2", Seq: 2, Phase: host.PhaseQueued, CreatedAt: now, UpdatedAt: now}
	if err := st.Update(ctx, func(tx host.Tx) error {
		if err := tx.InsertTurn(ctx, bound); err != nil {
			return err
		}
		return tx.InsertTurn(ctx, other)
	}); err != nil {
		t.Fatal(err)
	}

	var later error
	err := st.Update(ctx, func(tx host.Tx) error {
		s, _ := tx.Session(ctx, "w", "s")
		s.Title = "must not commit"
		_ = tx.UpdateSession(ctx, s)
		rebind := other
		rebind.Phase, rebind.ProviderSessionID, rebind.ProviderTurnID = host.PhaseDurablyAccepted, "ps", "pt"
		_ = tx.UpdateTurn(ctx, rebind) // unique violation: the transaction is aborted
		_, later = tx.Message(ctx, "w", "s", "m")
		return nil // fn ignores both errors
	})
	if !errors.Is(err, host.ErrDuplicate) {
		t.Fatalf("Update after an ignored failed statement: %v; want the ErrDuplicate that aborted it", err)
	}
	if !errors.Is(later, host.ErrDuplicate) {
		t.Fatalf("a call after the failure returned %v; want the same failure", later)
	}
	if s, _ := st.GetSession(ctx, "w", "s"); s.Title != "" {
		t.Fatalf("a write before the failure committed: title %q", s.Title)
	}
}

// A duplicate insert is reported without aborting the transaction (as on
// SQLite), so a command may go on after it.
func TestDuplicateInsertKeepsTheTransaction(t *testing.T) {
	url, _ := testSchema(t)
	st := openTest(t, url, Options{})
	ctx := t.Context()
	now := fixedTime()
	seedSession(t, st, "w", "s")
	claim := host.SubmitClaim{WorkspaceID: "w", ClientSubmitID: "c", SessionID: "s", Digest: "d", State: host.ClaimPrepared, CreatedAt: now, UpdatedAt: now}
	if err := st.Update(ctx, func(tx host.Tx) error { return tx.InsertClaim(ctx, claim) }); err != nil {
		t.Fatal(err)
	}
	err := st.Update(ctx, func(tx host.Tx) error {
		if err := tx.InsertClaim(ctx, claim); !errors.Is(err, host.ErrDuplicate) {
			return fmt.Errorf("second claim: %v, want ErrDuplicate", err)
		}
		if err := tx.InsertSession(ctx, host.Session{WorkspaceID: "w", ID: "s", CreatedAt: now, UpdatedAt: now}); !errors.Is(err, host.ErrDuplicate) {
			return fmt.Errorf("second session: %v, want ErrDuplicate", err)
		}
		s, err := tx.Session(ctx, "w", "s")
		if err != nil {
			return err
		}
		s.Title = "after the duplicates"
		return tx.UpdateSession(ctx, s)
	})
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := st.GetSession(ctx, "w", "s"); s.Title != "after the duplicates" {
		t.Fatalf("title %q: the write after the duplicates did not commit", s.Title)
	}
}

// PostgreSQL text cannot hold NUL; such input is invalid_input, not an
// internal error.
func TestNULIsInvalidInput(t *testing.T) {
	url, _ := testSchema(t)
	st := openTest(t, url, Options{})
	now := fixedTime()
	err := st.Update(t.Context(), func(tx host.Tx) error {
		return tx.InsertSession(t.Context(), host.Session{WorkspaceID: "w", ID: "s", Title: "a\x00b", CreatedAt: now, UpdatedAt: now})
	})
	if host.CodeOf(err) != host.CodeInvalidInput {
		t.Fatalf("NUL in a title: %v (%s); want invalid_input", err, host.CodeOf(err))
	}
}

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		err  error
		want error
	}{
		{&pgconn.PgError{Code: "23505"}, host.ErrDuplicate},
		{&pgconn.PgError{Code: "40001"}, host.ErrUnavailable},
		{&pgconn.PgError{Code: "40P01"}, host.ErrUnavailable},
		{&pgconn.PgError{Code: "55P03"}, host.ErrUnavailable},
		{&pgconn.PgError{Code: "57P01"}, host.ErrUnavailable},
		{&pgconn.PgError{Code: "08006"}, host.ErrUnavailable},
		{&pgconn.PgError{Code: "53300"}, host.ErrUnavailable},
		{fmt.Errorf("read: %w", io.ErrUnexpectedEOF), host.ErrUnavailable},
		{fmt.Errorf("dial: %w", &net.OpError{Op: "dial", Err: errors.New("refused")}), host.ErrUnavailable},
	} {
		if got := classify("op", c.err); !errors.Is(got, c.want) || !errors.Is(got, c.err) {
			t.Errorf("classify(%v) = %v; want it to wrap %v and keep the cause", c.err, got, c.want)
		}
	}
	for _, err := range []error{&pgconn.PgError{Code: "23503"}, &pgconn.PgError{Code: "42P01"}, context.Canceled} {
		got := classify("op", err)
		if errors.Is(got, host.ErrUnavailable) || errors.Is(got, host.ErrDuplicate) {
			t.Errorf("classify(%v) = %v; want neither unavailable nor duplicate", err, got)
		}
	}
}

func TestRedact(t *testing.T) {
	for _, u := range []string{
		"postgres://app:s3cret@db:5432/ensemble?sslmode=disable",
		"postgres://app@db/ensemble?password=s3cret",
		"host=db user=app password=s3cret dbname=ensemble",
	} {
		if got := Redact(u); strings.Contains(got, "s3cret") {
			t.Errorf("Redact(%q) = %q", u, got)
		}
	}
	if got := Redact("postgres://app@db/ensemble"); got != "postgres://app@db/ensemble" {
		t.Errorf("a URL without a password changed: %q", got)
	}
}

func TestOpenNoMigrateRefusesFreshDatabase(t *testing.T) {
	url, _ := testSchema(t)
	_, err := Open(t.Context(), url, Options{NoMigrate: true})
	if err == nil || !strings.Contains(err.Error(), "ensemble migrate up") {
		t.Fatalf("Open(NoMigrate) on an empty schema: %v; want an error naming `ensemble migrate up`", err)
	}
	var buf bytes.Buffer
	if err := MigrateStatus(t.Context(), url, &buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "pending") || strings.Contains(buf.String(), "applied") {
		t.Fatalf("the refusal must not migrate anything; status:\n%s", buf.String())
	}
	if err := MigrateUp(t.Context(), url); err != nil {
		t.Fatal(err)
	}
	if err := MigrateUp(t.Context(), url); err != nil {
		t.Fatalf("MigrateUp again: %v", err)
	}
	buf.Reset()
	if err := MigrateStatus(t.Context(), url, &buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "00001_init.sql") || strings.Contains(buf.String(), "pending") {
		t.Fatalf("status after MigrateUp:\n%s", buf.String())
	}
	openTest(t, url, Options{NoMigrate: true})
}
