package pg

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// TestSettleAheadAnswersWithoutARoundTrip: the probe queued by SettleAhead
// goes with the next statement that needs a round trip, and the
// settlement's TurnInteractions then costs none.
func TestSettleAheadAnswersWithoutARoundTrip(t *testing.T) {
	f := newDeferredFixture(t)
	got, trips := f.interactionsAhead(t, func(ctx context.Context, tx host.Tx) error {
		_, err := tx.Turn(ctx, f.ws, f.sid, f.queued.ID) // carries the probe
		return err
	})
	if len(got) != 0 {
		t.Fatalf("interactions = %+v, want none", got)
	}
	if trips != 0 {
		t.Fatalf("TurnInteractions made %d round trips, want 0 (the probe went ahead)", trips)
	}
}

// TestSettleAheadSeesWritesSinceTheProbe: an interaction written in the
// same transaction after the probe ran makes the probe stale, and the
// settlement reads again rather than miss it.
func TestSettleAheadSeesWritesSinceTheProbe(t *testing.T) {
	f := newDeferredFixture(t)
	got, _ := f.interactionsAhead(t, func(ctx context.Context, tx host.Tx) error {
		if _, err := tx.Turn(ctx, f.ws, f.sid, f.queued.ID); err != nil { // the probe finds nothing
			return err
		}
		return tx.InsertInteraction(ctx, f.pendingInteraction("req-1"))
	})
	if len(got) != 1 || got[0].RequestID != "req-1" {
		t.Fatalf("interactions = %+v, want req-1 written after the probe", got)
	}
}

// TestSettleAheadStillQueuedIsSentOnce: a probe no round trip has carried
// yet is sent when the settlement asks, not sent a second time beside a
// new one, and what it finds is answered.
func TestSettleAheadStillQueuedIsSentOnce(t *testing.T) {
	f := newDeferredFixture(t)
	if err := f.st.Update(t.Context(), func(tx host.Tx) error {
		return tx.InsertInteraction(t.Context(), f.pendingInteraction("req-1"))
	}); err != nil {
		t.Fatal(err)
	}
	f.tr.reset()
	got, _ := f.interactionsAhead(t, func(context.Context, host.Tx) error { return nil })
	if len(got) != 1 || got[0].RequestID != "req-1" {
		t.Fatalf("interactions = %+v, want req-1", got)
	}
	// The probe once, then the list it found rows for.
	reads := 0
	for _, tt := range f.tr.transactions() {
		reads += strings.Count(tt.String(), "select interactions")
	}
	if reads != 2 {
		t.Fatalf("reads of interactions = %d, want 2 (the probe, then the list); %v", reads, f.tr.transactions())
	}
}

// interactionsAhead runs one transaction that locks the fixture's session,
// sends the queued Turn's settlement probe ahead, runs between, and then
// lists the Turn's interactions as a settlement does; trips counts the
// round trips that listing made.
func (f *deferredFixture) interactionsAhead(t *testing.T, between func(context.Context, host.Tx) error) (got []host.Interaction, trips int) {
	t.Helper()
	err := f.st.Update(t.Context(), func(tx host.Tx) error {
		ctx := t.Context()
		if _, err := tx.Session(ctx, f.ws, f.sid); err != nil {
			return err
		}
		tx.SettleAhead(ctx, f.ws, f.sid, f.queued.ID)
		if err := between(ctx, tx); err != nil {
			return err
		}
		before := f.tr.openTrips()
		var err error
		got, err = tx.TurnInteractions(ctx, f.ws, f.sid, f.queued.ID)
		trips = f.tr.openTrips() - before
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return got, trips
}

// TestSettleAheadNeedsTheSessionLock: without the session's lock nothing
// is queued (another transaction could change what the probe read).
func TestSettleAheadNeedsTheSessionLock(t *testing.T) {
	f := newDeferredFixture(t)
	err := f.st.Update(t.Context(), func(htx host.Tx) error {
		htx.SettleAhead(context.Background(), f.ws, f.sid, f.queued.ID)
		if p := htx.(*tx).probeAhead; p != nil {
			t.Errorf("a probe was queued without the session lock: %+v", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestSettleAheadBeforeTheLockReadsAfterIt: a probe asked for before the
// session's lock is read after the lock is granted, so it sees what the
// transaction the lock waited for committed.
func TestSettleAheadBeforeTheLockReadsAfterIt(t *testing.T) {
	f := newDeferredFixture(t)
	ctx := t.Context()
	locked, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() { // holds the session's lock, then writes an interaction
		done <- f.st.Update(ctx, func(tx host.Tx) error {
			if _, err := tx.Session(ctx, f.ws, f.sid); err != nil {
				return err
			}
			close(locked)
			<-release
			return tx.InsertInteraction(ctx, f.pendingInteraction("req-late"))
		})
	}()
	<-locked
	admin := adminConn(t)
	waited := make(chan struct{})
	go func() { // lets the writer commit once the settlement waits for the lock
		defer close(release)
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			var waiting bool
			if err := admin.QueryRow(ctx, `SELECT count(*) > 0 FROM pg_stat_activity
				WHERE application_name = $1 AND wait_event_type = 'Lock'`, f.schema).Scan(&waiting); err != nil {
				t.Error(err)
				return
			}
			if waiting {
				close(waited)
				return
			}
		}
	}()
	var got []host.Interaction
	err := f.st.Update(ctx, func(tx host.Tx) error {
		tx.SettleAhead(ctx, f.ws, f.sid, f.queued.ID) // before the lock
		if _, err := tx.Turn(ctx, f.ws, f.sid, f.queued.ID); err != nil {
			return err
		}
		var err error
		got, err = tx.TurnInteractions(ctx, f.ws, f.sid, f.queued.ID)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("writer: %v", err)
	}
	select {
	case <-waited:
	default:
		t.Fatal("the settlement never waited for the session's lock")
	}
	if len(got) != 1 || got[0].RequestID != "req-late" {
		t.Fatalf("interactions = %+v, want req-late, committed while the lock was awaited", got)
	}
}

// pendingInteraction is a pending approval of the fixture's queued Turn.
func (f *deferredFixture) pendingInteraction(requestID string) host.Interaction {
	now := time.Now().UTC().Truncate(time.Millisecond)
	return host.Interaction{WorkspaceID: f.ws, SessionID: f.sid, TurnID: f.queued.ID,
		RequestID: requestID, RootSessionID: f.sid, Kind: host.InteractionApproval, Title: "run it?",
		State: host.InteractionPending, CreatedAt: now, UpdatedAt: now}
}
