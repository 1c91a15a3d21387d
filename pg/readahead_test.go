package pg

import (
	"testing"

	"github.com/ensemble-dev/ensemble/host"
)

// TestSessionReadAhead: a Turn read takes its session's lock with a read of
// the whole row, and the session read right after it costs no round trip.
// A read ahead is only used while nothing was queued or sent since: after
// this transaction's own session update, the read goes to the server and
// sees the update.
func TestSessionReadAhead(t *testing.T) {
	f := newDeferredFixture(t)
	ctx := t.Context()
	err := f.st.Update(ctx, func(tx host.Tx) error {
		if _, err := tx.Turn(ctx, f.ws, f.sid, f.queued.ID); err != nil {
			return err
		}
		before := f.tr.openTrips()
		s, err := tx.Session(ctx, f.ws, f.sid)
		if err != nil {
			return err
		}
		if s.ID != f.sid || s.TurnCount != 2 {
			t.Errorf("session read ahead = %+v, want %s with 2 turns", s, f.sid)
		}
		if after := f.tr.openTrips(); after != before {
			t.Errorf("the session read after the turn read took %d round trips, want 0", after-before)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	err = f.st.Update(ctx, func(tx host.Tx) error {
		if _, err := tx.Turn(ctx, f.ws, f.sid, f.queued.ID); err != nil {
			return err
		}
		// Not the read ahead's session: read from the server.
		if _, err := tx.Session(ctx, f.ws, "s-other"); err == nil {
			t.Errorf("another session's read found a row")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	var s host.Session
	err = f.st.Update(ctx, func(tx host.Tx) (err error) {
		s, err = tx.Session(ctx, f.ws, f.sid)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	err = f.st.Update(ctx, func(tx host.Tx) error {
		if _, err := tx.Turn(ctx, f.ws, f.sid, f.queued.ID); err != nil {
			return err
		}
		s.Title = "renamed in this transaction"
		if err := tx.UpdateSession(ctx, s); err != nil {
			return err
		}
		again, err := tx.Session(ctx, f.ws, f.sid)
		if err != nil {
			return err
		}
		if again.Title != s.Title {
			t.Errorf("session after this transaction's update has title %q, want %q", again.Title, s.Title)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
