package pg

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// deferredFixture is a session with a settled turn bound to the provider
// identity ps/pt-1 and a queued turn, so rebinding the queued turn to that
// identity violates the unique index at the server.
type deferredFixture struct {
	st      *Store
	tr      *rtTracer
	schema  string
	ws, sid string
	bound   host.Turn
	queued  host.Turn
}

func newDeferredFixture(t *testing.T) *deferredFixture {
	t.Helper()
	url, schema := testSchema(t)
	tr := &rtTracer{}
	f := &deferredFixture{st: openTest(t, url, Options{Tracer: tr, Logger: quietLogger()}), tr: tr,
		schema: schema, ws: "ws-deferred", sid: "s-deferred"}
	now := time.Now().UTC().Truncate(time.Millisecond)
	f.bound = host.Turn{WorkspaceID: f.ws, SessionID: f.sid, ID: "t-1", Seq: 1, Origin: "user",
		Phase: host.PhaseSettled, Outcome: host.OutcomeCompleted, ProviderSessionID: "ps", ProviderTurnID: "pt-1",
		CreatedAt: now, UpdatedAt: now, SettledAt: &now}
	f.queued = host.Turn{WorkspaceID: f.ws, SessionID: f.sid, ID: "t-2", Seq: 2, Origin: "user",
		Phase: host.PhaseQueued, CreatedAt: now, UpdatedAt: now}
	err := f.st.Update(t.Context(), func(tx host.Tx) error {
		if err := tx.InsertSession(t.Context(), host.Session{WorkspaceID: f.ws, ID: f.sid, RootID: f.sid,
			Agent: "sim", TurnCount: 2, CreatedAt: now, UpdatedAt: now}); err != nil {
			return err
		}
		if err := tx.InsertTurn(t.Context(), f.bound); err != nil {
			return err
		}
		return tx.InsertTurn(t.Context(), f.queued)
	})
	if err != nil {
		t.Fatalf("seed: %v", err)
	}
	return f
}

// rebind writes, in tx, a prompt message (deferred) and the queued turn
// bound to the identity the settled turn holds (deferred: its row is read
// under the session lock), and reports what the two calls returned.
func (f *deferredFixture) rebind(ctx context.Context, tx host.Tx) (putErr, updateErr error) {
	s, err := tx.Session(ctx, f.ws, f.sid)
	if err != nil {
		return err, err
	}
	tu, err := tx.Turn(ctx, f.ws, f.sid, f.queued.ID)
	if err != nil {
		return err, err
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	putErr = tx.PutMessage(ctx, host.Message{WorkspaceID: f.ws, SessionID: f.sid, ID: "m-deferred", TurnID: tu.ID,
		Role: host.RoleUser, Kind: host.KindText, Version: s.MessageVersion + 1, Ordinal: s.MessageVersion + 1,
		Content: host.MessageContent{Text: "never committed"}, CreatedAt: now, UpdatedAt: now})
	tu.Phase, tu.ProviderSessionID, tu.ProviderTurnID = host.PhaseDurablyAccepted, "ps", "pt-1"
	return putErr, tx.UpdateTurn(ctx, tu)
}

// nothingCommitted checks that neither deferred write landed.
func (f *deferredFixture) nothingCommitted(t *testing.T) {
	t.Helper()
	tu, err := f.st.GetTurn(t.Context(), f.ws, f.sid, f.queued.ID)
	if err != nil {
		t.Fatal(err)
	}
	if tu.Phase != host.PhaseQueued || tu.ProviderTurnID != "" {
		t.Fatalf("turn after the failed transaction = %s %q, want queued and unbound", tu.Phase, tu.ProviderTurnID)
	}
	page, err := f.st.ListMessages(t.Context(), f.ws, f.sid, host.MessageQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Messages) != 0 {
		t.Fatalf("messages after the failed transaction = %d, want none", len(page.Messages))
	}
}

// TestDeferredWriteFailsAtCommit: the deferred UPDATE's unique violation
// is found when it goes to the server with COMMIT; Update reports it as
// the duplicate UpdateTurn itself used to return, and the deferred
// message before it is not committed either.
func TestDeferredWriteFailsAtCommit(t *testing.T) {
	f := newDeferredFixture(t)
	var putErr, updateErr error
	err := f.st.Update(t.Context(), func(tx host.Tx) error {
		putErr, updateErr = f.rebind(t.Context(), tx)
		return nil // the Host returns what the calls returned; both are nil
	})
	if putErr != nil || updateErr != nil {
		t.Fatalf("PutMessage, UpdateTurn = %v, %v; want both deferred (nil)", putErr, updateErr)
	}
	if !errors.Is(err, host.ErrDuplicate) {
		t.Fatalf("Update = %v, want host.ErrDuplicate", err)
	}
	f.nothingCommitted(t)
	// The pool is still usable: the connection was rolled back and returned.
	if _, err := f.st.GetSession(t.Context(), f.ws, f.sid); err != nil {
		t.Fatalf("GetSession after the failed transaction: %v", err)
	}
}

// TestDeferredWriteFailsAtRead: a read flushes the deferred writes before
// it; when one of them fails the read fails, and Update reports the
// deferred write's error, not whatever fn made of the failed read.
func TestDeferredWriteFailsAtRead(t *testing.T) {
	f := newDeferredFixture(t)
	var readErr error
	errFn := errors.New("fn's own error")
	err := f.st.Update(t.Context(), func(tx host.Tx) error {
		if putErr, updateErr := f.rebind(t.Context(), tx); putErr != nil || updateErr != nil {
			t.Errorf("PutMessage, UpdateTurn = %v, %v; want both deferred (nil)", putErr, updateErr)
		}
		_, readErr = tx.Turn(t.Context(), f.ws, f.sid, f.bound.ID)
		return errFn
	})
	if !errors.Is(readErr, host.ErrDuplicate) {
		t.Fatalf("the read after the deferred write = %v, want its host.ErrDuplicate", readErr)
	}
	if !errors.Is(err, host.ErrDuplicate) || errors.Is(err, errFn) {
		t.Fatalf("Update = %v, want the deferred write's host.ErrDuplicate", err)
	}
	f.nothingCommitted(t)
}

// TestDeferredWriteConnectionLostAtCommit: the connection dies while the
// deferred writes wait; they go with COMMIT in one round trip, which fails
// as unavailable, and nothing is committed.
func TestDeferredWriteConnectionLostAtCommit(t *testing.T) {
	f := newDeferredFixture(t)
	f.tr.reset()
	err := f.st.Update(t.Context(), func(tx host.Tx) error {
		s, err := tx.Session(t.Context(), f.ws, f.sid)
		if err != nil {
			return err
		}
		tu, err := tx.Turn(t.Context(), f.ws, f.sid, f.queued.ID)
		if err != nil {
			return err
		}
		tu.Phase = host.PhaseDispatched
		if err := tx.UpdateTurn(t.Context(), tu); err != nil {
			return err
		}
		s.Title = "never committed"
		if err := tx.UpdateSession(t.Context(), s); err != nil {
			return err
		}
		if n := terminate(t, f.schema); n < 1 {
			t.Errorf("terminated %d backends, want at least this transaction's", n)
		}
		return nil
	})
	if !errors.Is(err, host.ErrUnavailable) {
		t.Fatalf("Update = %v, want host.ErrUnavailable", err)
	}
	tu, gerr := f.st.GetTurn(t.Context(), f.ws, f.sid, f.queued.ID)
	if gerr != nil {
		t.Fatal(gerr)
	}
	s, gerr := f.st.GetSession(t.Context(), f.ws, f.sid)
	if gerr != nil {
		t.Fatal(gerr)
	}
	if tu.Phase != host.PhaseQueued || s.Title == "never committed" {
		t.Fatalf("after the lost commit: turn %s, title %q; want queued and the old title", tu.Phase, s.Title)
	}
	txs := f.tr.transactions()
	if len(txs) != 1 {
		t.Fatalf("transactions = %d, want 1:%v", len(txs), txs)
	}
	last := txs[0].trips[len(txs[0].trips)-1]
	if want := []string{"update turns", "update sessions", "commit"}; !slices.Equal(last, want) {
		t.Fatalf("last round trip = %v, want %v (the deferred writes with COMMIT)", last, want)
	}
}

// TestCommitOutlivesTheCallersCancellation: a context cancelled while
// COMMIT's round trip is in flight does not cut it. Cut, it reported
// "canceled" whether or not the server had committed (here it had not
// yet; a moment later it would have, and the caller would have taken a
// made commit for one not made): now the round trip finishes and Update
// reports what happened.
func TestCommitOutlivesTheCallersCancellation(t *testing.T) {
	f := newDeferredFixture(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	err := f.st.Update(ctx, func(htx host.Tx) error {
		tu, err := htx.Turn(ctx, f.ws, f.sid, f.queued.ID)
		if err != nil {
			return err
		}
		tu.Phase = host.PhaseDispatched
		if err := htx.UpdateTurn(ctx, tu); err != nil {
			return err
		}
		// Holds COMMIT's round trip on the server past the cancellation.
		htx.(*tx).tx.queue(deferred{op: "sleep", sql: "SELECT pg_sleep(0.4)"})
		time.AfterFunc(150*time.Millisecond, cancel)
		return nil
	})
	if ctx.Err() == nil {
		t.Fatal("the context was not cancelled during COMMIT's round trip")
	}
	tu, gerr := f.st.GetTurn(t.Context(), f.ws, f.sid, f.queued.ID)
	if gerr != nil {
		t.Fatal(gerr)
	}
	if err != nil || tu.Phase != host.PhaseDispatched {
		t.Fatalf("Update = %v with the Turn %s; want the commit reported as made", err, tu.Phase)
	}
}
