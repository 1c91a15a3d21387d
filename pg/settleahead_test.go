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
	var got []host.Interaction
	var before, after int
	err := f.st.Update(t.Context(), func(tx host.Tx) error {
		ctx := t.Context()
		if _, err := tx.Session(ctx, f.ws, f.sid); err != nil {
			return err
		}
		tx.SettleAhead(ctx, f.ws, f.sid, f.queued.ID)
		if _, err := tx.Turn(ctx, f.ws, f.sid, f.queued.ID); err != nil { // carries the probe
			return err
		}
		before = f.tr.openTrips()
		var err error
		got, err = tx.TurnInteractions(ctx, f.ws, f.sid, f.queued.ID)
		after = f.tr.openTrips()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("interactions = %+v, want none", got)
	}
	if after != before {
		t.Fatalf("TurnInteractions made %d round trips, want 0 (the probe went ahead)", after-before)
	}
}

// TestSettleAheadSeesWritesSinceTheProbe: an interaction written in the
// same transaction after the probe ran makes the probe stale, and the
// settlement reads again rather than miss it.
func TestSettleAheadSeesWritesSinceTheProbe(t *testing.T) {
	f := newDeferredFixture(t)
	var got []host.Interaction
	err := f.st.Update(t.Context(), func(tx host.Tx) error {
		ctx := t.Context()
		if _, err := tx.Session(ctx, f.ws, f.sid); err != nil {
			return err
		}
		tx.SettleAhead(ctx, f.ws, f.sid, f.queued.ID)
		if _, err := tx.Turn(ctx, f.ws, f.sid, f.queued.ID); err != nil { // the probe finds nothing
			return err
		}
		now := time.Now().UTC().Truncate(time.Millisecond)
		if err := tx.InsertInteraction(ctx, host.Interaction{WorkspaceID: f.ws, SessionID: f.sid, TurnID: f.queued.ID,
			RequestID: "req-1", RootSessionID: f.sid, Kind: host.InteractionApproval, Title: "run it?",
			State: host.InteractionPending, CreatedAt: now, UpdatedAt: now}); err != nil {
			return err
		}
		var err error
		got, err = tx.TurnInteractions(ctx, f.ws, f.sid, f.queued.ID)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].RequestID != "req-1" {
		t.Fatalf("interactions = %+v, want req-1 written after the probe", got)
	}
}

// TestSettleAheadStillQueuedIsSentOnce: a probe no round trip has carried
// yet is sent when the settlement asks, not sent a second time beside a
// new one, and what it finds is answered.
func TestSettleAheadStillQueuedIsSentOnce(t *testing.T) {
	f := newDeferredFixture(t)
	now := time.Now().UTC().Truncate(time.Millisecond)
	if err := f.st.Update(t.Context(), func(tx host.Tx) error {
		return tx.InsertInteraction(t.Context(), host.Interaction{WorkspaceID: f.ws, SessionID: f.sid, TurnID: f.queued.ID,
			RequestID: "req-1", RootSessionID: f.sid, Kind: host.InteractionApproval, Title: "run it?",
			State: host.InteractionPending, CreatedAt: now, UpdatedAt: now})
	}); err != nil {
		t.Fatal(err)
	}
	f.tr.reset()
	var got []host.Interaction
	err := f.st.Update(t.Context(), func(tx host.Tx) error {
		ctx := t.Context()
		if _, err := tx.Session(ctx, f.ws, f.sid); err != nil {
			return err
		}
		tx.SettleAhead(ctx, f.ws, f.sid, f.queued.ID)
		var err error
		got, err = tx.TurnInteractions(ctx, f.ws, f.sid, f.queued.ID)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
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
