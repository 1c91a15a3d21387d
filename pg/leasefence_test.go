package pg

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// outputFenceFixture: the deferred fixture's session, leased by epA, with
// a Turn whose output is being committed (durably accepted, applied
// sequence 0, the session at message version 0).
func outputFenceFixture(t *testing.T) (*deferredFixture, string) {
	t.Helper()
	f := newDeferredFixture(t)
	ctx := t.Context()
	if _, err := f.st.AcquireLease(ctx, f.ws, f.sid, "epA", time.Hour); err != nil {
		t.Fatal(err)
	}
	err := f.st.Update(ctx, func(tx host.Tx) error {
		tu, err := tx.Turn(ctx, f.ws, f.sid, f.queued.ID)
		if err != nil {
			return err
		}
		tu.Phase, tu.ProviderSessionID, tu.ProviderTurnID = host.PhaseDurablyAccepted, "ps", "pt-2"
		return tx.UpdateTurn(ctx, tu)
	})
	if err != nil {
		t.Fatal(err)
	}
	return f, f.queued.ID
}

// fencedOutputCheck runs the output commit's fence and check: the lease
// check, then ExpectOutput, as turnSink.load calls them.
func fencedOutputCheck(ctx context.Context, f *deferredFixture, owner string, gen, appliedSeq int64, turnID string) func(host.Tx) error {
	return func(tx host.Tx) error {
		if err := tx.CheckLease(ctx, f.ws, f.sid, owner, gen); err != nil {
			return err
		}
		if err := tx.ExpectOutput(ctx, f.ws, f.sid, turnID, appliedSeq, 0); err != nil {
			return err
		}
		return tx.AdvanceSession(ctx, f.ws, f.sid, 1, time.Now().UTC())
	}
}

// TestLeaseFenceJoinsTheOutputCheck: a streamed chunk's lease check goes
// in the output check's statement (one statement fewer per chunk), and the
// answers stay apart: a lost lease is ErrLeaseLost, another writer's
// change ErrNotFound, and neither commits anything.
func TestLeaseFenceJoinsTheOutputCheck(t *testing.T) {
	f, turnID := outputFenceFixture(t)
	ctx := t.Context()

	f.tr.reset()
	if err := f.st.Update(ctx, fencedOutputCheck(ctx, f, "epA", 1, 0, turnID)); err != nil {
		t.Fatalf("fenced output check of the owner: %v", err)
	}
	txs := f.tr.transactions()
	if n := statements(txs); n != 4 {
		t.Fatalf("statements = %d, want 4 (BEGIN, the check with the lease fence, the session update, COMMIT); trips:%v", n, txs)
	}
	for _, trip := range txs[0].trips {
		if slices.Contains(trip, "select session_leases") {
			t.Fatalf("the lease check went as its own statement; trips:%v", txs)
		}
	}

	version := func() int64 {
		var v int64
		if err := f.st.pool.QueryRow(ctx, `SELECT message_version FROM sessions WHERE workspace_id = $1 AND id = $2`,
			f.ws, f.sid).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	// The session is at version 1 now: check against it.
	check := func(owner string, gen int64, applied int64) func(host.Tx) error {
		return func(tx host.Tx) error {
			if err := tx.CheckLease(ctx, f.ws, f.sid, owner, gen); err != nil {
				return err
			}
			if err := tx.ExpectOutput(ctx, f.ws, f.sid, turnID, applied, 1); err != nil {
				return err
			}
			return tx.AdvanceSession(ctx, f.ws, f.sid, 2, time.Now().UTC())
		}
	}
	if err := f.st.Update(ctx, check("epB", 1, 0)); !errors.Is(err, host.ErrLeaseLost) {
		t.Fatalf("another owner: %v, want ErrLeaseLost", err)
	}
	if err := f.st.Update(ctx, check("epA", 2, 0)); !errors.Is(err, host.ErrLeaseLost) {
		t.Fatalf("another generation: %v, want ErrLeaseLost", err)
	}
	if err := f.st.Update(ctx, check("epA", 1, 7)); !errors.Is(err, host.ErrNotFound) {
		t.Fatalf("a Turn another writer moved: %v, want ErrNotFound", err)
	}
	if v := version(); v != 1 {
		t.Fatalf("message version %d after refused checks, want 1", v)
	}
}

// TestLeaseFenceInOutputCheckSeesTakeover: a takeover that holds the lease
// row when the output check runs makes it wait, and once the takeover
// commits the check answers ErrLeaseLost from the lease's new owner, not
// from the row it first found.
func TestLeaseFenceInOutputCheckSeesTakeover(t *testing.T) {
	f, turnID := outputFenceFixture(t)
	ctx := t.Context()
	admin := adminConn(t)
	takeover, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer takeover.Rollback(ctx)
	if _, err := takeover.Exec(ctx, `SET LOCAL search_path = `+f.schema); err != nil {
		t.Fatal(err)
	}
	if _, err := takeover.Exec(ctx, `SELECT 1 FROM session_leases WHERE workspace_id = $1 AND session_id = $2 FOR UPDATE`,
		f.ws, f.sid); err != nil {
		t.Fatal(err)
	}
	if _, err := takeover.Exec(ctx, `UPDATE session_leases SET owner = 'epB', generation = 2
		WHERE workspace_id = $1 AND session_id = $2`, f.ws, f.sid); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- f.st.Update(ctx, fencedOutputCheck(ctx, f, "epA", 1, 0, turnID)) }()
	for waiting := false; !waiting; {
		if err := admin.QueryRow(ctx, `SELECT count(*) > 0 FROM pg_stat_activity
			WHERE application_name = $1 AND wait_event_type = 'Lock'`, f.schema).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			t.Fatalf("the output check passed a takeover holding the lease: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if err := takeover.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, host.ErrLeaseLost) {
		t.Fatalf("output check after the takeover committed: %v, want ErrLeaseLost", err)
	}
}
