package pg

import (
	"errors"
	"slices"
	"testing"

	"github.com/ensemble-dev/ensemble/host"
)

// TestOutboxInsertRunsRowUpdates: the row updates queued just before an
// outbox insert run as its parts, in one statement with it; an earlier
// update of the same row stays a statement of its own before it, so both
// apply in order. The facts get their ids as before.
func TestOutboxInsertRunsRowUpdates(t *testing.T) {
	f := newDeferredFixture(t)
	ctx := t.Context()
	f.tr.reset()
	var ids []int64
	err := f.st.Update(ctx, func(tx host.Tx) error {
		s, err := tx.Session(ctx, f.ws, f.sid)
		if err != nil {
			return err
		}
		tu, err := tx.Turn(ctx, f.ws, f.sid, f.queued.ID)
		if err != nil {
			return err
		}
		s.Title = "first"
		if err := tx.UpdateSession(ctx, s); err != nil {
			return err
		}
		tu.Phase = host.PhaseDispatched
		if err := tx.UpdateTurn(ctx, tu); err != nil {
			return err
		}
		s.Title, s.TurnCount = "second", 3
		if err := tx.UpdateSession(ctx, s); err != nil {
			return err
		}
		ids, err = tx.AppendFacts(ctx, host.Fact{WorkspaceID: f.ws, Kind: host.FactSessionChanged, SessionID: f.sid},
			host.Fact{WorkspaceID: f.ws, Kind: host.FactSessionChanged, SessionID: f.sid, TurnID: tu.ID})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	txs := f.tr.transactions()
	if len(txs) != 1 {
		t.Fatalf("transactions = %d, want 1", len(txs))
	}
	last := txs[0].trips[len(txs[0].trips)-1]
	// The first session update waits behind the turn update: it stays on
	// its own; the turn update and the second session update are parts.
	if want := []string{"update sessions", "with u0", "commit"}; !slices.Equal(last, want) {
		t.Fatalf("commit round trip = %v, want %v", last, want)
	}
	if len(ids) != 2 || ids[0] == 0 || ids[1] != ids[0] {
		t.Fatalf("fact ids = %v, want one row's id for both facts", ids)
	}
	s, err := f.st.GetSession(ctx, f.ws, f.sid)
	if err != nil {
		t.Fatal(err)
	}
	tu, err := f.st.GetTurn(ctx, f.ws, f.sid, f.queued.ID)
	if err != nil {
		t.Fatal(err)
	}
	if s.Title != "second" || s.TurnCount != 3 || tu.Phase != host.PhaseDispatched {
		t.Fatalf("after commit: session %q with %d turns, turn %s; want second, 3, dispatched", s.Title, s.TurnCount, tu.Phase)
	}
}

// TestOutboxPartFailsTheTransaction: a part that violates a constraint
// fails the transaction at commit as the update alone did
// (host.ErrDuplicate); neither it nor the facts are committed.
func TestOutboxPartFailsTheTransaction(t *testing.T) {
	f := newDeferredFixture(t)
	ctx := t.Context()
	var factErr error
	err := f.st.Update(ctx, func(tx host.Tx) error {
		if putErr, updateErr := f.rebind(ctx, tx); putErr != nil || updateErr != nil {
			t.Errorf("PutMessage, UpdateTurn = %v, %v; want both deferred (nil)", putErr, updateErr)
		}
		_, factErr = tx.AppendFacts(ctx, host.Fact{WorkspaceID: f.ws, Kind: host.FactSessionChanged, SessionID: f.sid})
		return nil
	})
	if factErr != nil {
		t.Fatalf("AppendFacts = %v, want deferred (nil)", factErr)
	}
	if !errors.Is(err, host.ErrDuplicate) {
		t.Fatalf("Update = %v, want host.ErrDuplicate", err)
	}
	f.nothingCommitted(t)
	var n int
	if err := f.st.pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("outbox rows = %d, want 0", n)
	}
}

func TestShiftParams(t *testing.T) {
	got := shiftParams(`UPDATE t SET a = $1, b = $10 WHERE c = $2`, 14)
	if want := `UPDATE t SET a = $15, b = $24 WHERE c = $16`; got != want {
		t.Fatalf("shiftParams = %q, want %q", got, want)
	}
}
