package pg

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/host/storetest"
)

func TestLeaseContract(t *testing.T) {
	url, _ := testSchema(t)
	storetest.RunLeases(t, func(t *testing.T) host.Store { return openTest(t, url, Options{}) })
}

// TestLeaseFenceLetsRenewalsThrough: a fenced write holds the lease row in
// key-share mode, so the owner's renewal (it changes only the expiry)
// does not wait for it, and no fenced write queues behind a waiting
// renewal; a takeover locks the row for update and still waits for it.
func TestLeaseFenceLetsRenewalsThrough(t *testing.T) {
	url, schema := testSchema(t)
	st := openTest(t, url, Options{})
	ctx := t.Context()
	const ws, sid = "ws-fence", "s-fence"
	if _, err := st.AcquireLease(ctx, ws, sid, "epA", time.Hour); err != nil {
		t.Fatal(err)
	}
	fenced, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- st.Update(ctx, func(tx host.Tx) error {
			if err := tx.CheckLease(ctx, ws, sid, "epA", 1); err != nil {
				return err
			}
			// The fence goes with the next statement, as the fenced Turn
			// read sends it.
			if _, err := tx.Turn(ctx, ws, sid, "t-none"); !errors.Is(err, host.ErrNotFound) {
				return fmt.Errorf("fenced read: %v", err)
			}
			close(fenced)
			<-release // the write is still open
			return nil
		})
	}()
	<-fenced
	// Bounded only so a regression fails instead of hanging: it waited
	// for the fenced write's commit before.
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := st.RenewLease(rctx, ws, sid, "epA", 1, time.Hour)
	cancel()
	if err != nil {
		close(release)
		t.Fatalf("renewal while a fenced write is open: %v", err)
	}
	// A takeover (the lease released, another owner) waits for the write.
	if err := st.ReleaseLease(ctx, ws, sid, "epA", 1); err != nil {
		close(release)
		t.Fatal(err)
	}
	took := make(chan host.SessionLease, 1)
	go func() {
		l, err := st.AcquireLease(ctx, ws, sid, "epB", time.Hour)
		if err != nil {
			t.Error(err)
		}
		took <- l
	}()
	admin := adminConn(t)
	for waiting := false; !waiting; {
		if err := admin.QueryRow(ctx, `SELECT count(*) > 0 FROM pg_stat_activity
			WHERE application_name = $1 AND wait_event_type = 'Lock'`, schema).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		select {
		case l := <-took:
			close(release)
			t.Fatalf("a takeover passed an open fenced write: %+v", l)
		case <-time.After(5 * time.Millisecond):
		}
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("fenced write: %v", err)
	}
	if l := <-took; l.Owner != "epB" || l.Generation != 2 {
		t.Fatalf("takeover after the write: %+v", l)
	}
}

// TestLeaseFenceGoesWithTheFencedRead: the fence is sent with the Turn read
// that follows it (no round trip of its own), and a refused fence commits
// nothing: when no statement follows it before COMMIT (here: only a
// deferred write), it goes in COMMIT's batch and the server, refusing it,
// rolls the transaction back.
func TestLeaseFenceGoesWithTheFencedRead(t *testing.T) {
	f := newDeferredFixture(t)
	ctx := t.Context()
	if _, err := f.st.AcquireLease(ctx, f.ws, f.sid, "epA", time.Hour); err != nil {
		t.Fatal(err)
	}
	f.tr.reset()
	err := f.st.Update(ctx, func(tx host.Tx) error {
		if err := tx.CheckLease(ctx, f.ws, f.sid, "epA", 1); err != nil {
			return err
		}
		_, err := tx.Turn(ctx, f.ws, f.sid, f.queued.ID)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := roundTrips(f.tr.transactions()); !slices.Equal(got, []int{2}) {
		t.Fatalf("fenced read: round trips %v, want [2] (BEGIN, fence, lock and read; COMMIT)", got)
	}

	now := time.Now().UTC()
	put := func(tx host.Tx, id string) error {
		return tx.PutMessage(ctx, host.Message{WorkspaceID: f.ws, SessionID: f.sid, ID: id,
			Role: host.RoleUser, Kind: host.KindText, Version: 1, Ordinal: 1,
			Content: host.MessageContent{Text: id}, CreatedAt: now, UpdatedAt: now})
	}
	f.tr.reset()
	err = f.st.Update(ctx, func(tx host.Tx) error {
		if err := tx.CheckLease(ctx, f.ws, f.sid, "epA", 1); err != nil {
			return err
		}
		return put(tx, "m-owned")
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := roundTrips(f.tr.transactions()); !slices.Equal(got, []int{1}) {
		t.Fatalf("fenced write: round trips %v, want [1] (BEGIN, fence, write, COMMIT)", got)
	}

	f.tr.reset()
	err = f.st.Update(ctx, func(tx host.Tx) error {
		if err := tx.CheckLease(ctx, f.ws, f.sid, "epB", 1); err != nil {
			return err
		}
		return put(tx, "m-fenced")
	})
	if !errors.Is(err, host.ErrLeaseLost) {
		t.Fatalf("write fenced by another owner's lease: %v, want ErrLeaseLost", err)
	}
	var n int
	if err := f.st.pool.QueryRow(ctx, `SELECT count(*) FROM messages WHERE id = 'm-fenced'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("a write behind a refused fence committed")
	}
}
