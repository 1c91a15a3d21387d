package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// RunLeases is the session-lease contract (host.LeaseStore, host.LeaseTx)
// for stores that keep leases. open works as for Run.
func RunLeases(t *testing.T, open func(t *testing.T) host.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, st host.Store)
	}{
		{"AcquireRenewTakeOver", testLeaseTakeOver},
		{"FenceRejectsStaleOwner", testLeaseFence},
		{"ConcurrentAcquireOneWinner", testLeaseConcurrent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := open(t)
			t.Cleanup(func() { st.Close() })
			tc.fn(t, st)
		})
	}
}

func testLeaseTakeOver(t *testing.T, st host.Store) {
	ctx := context.Background()
	ls := st
	ws, sid := uid("ws"), uid("ses")
	if _, err := ls.GetLease(ctx, ws, sid); !errors.Is(err, host.ErrNotFound) {
		t.Fatalf("no lease yet: %v", err)
	}
	a, err := ls.AcquireLease(ctx, ws, sid, "epA", time.Hour)
	if err != nil || a.Owner != "epA" || a.Generation != 1 || a.TookOver != "" || !a.Live {
		t.Fatalf("first acquire: %+v %v", a, err)
	}
	// A live lease of another owner is not taken.
	b, err := ls.AcquireLease(ctx, ws, sid, "epB", time.Hour)
	if err != nil || b.Owner != "epA" || b.Generation != 1 {
		t.Fatalf("acquire against a live lease: %+v %v", b, err)
	}
	// Renewing one's own lease keeps the generation.
	if again, err := ls.AcquireLease(ctx, ws, sid, "epA", time.Hour); err != nil || again.Generation != 1 || again.TookOver != "" {
		t.Fatalf("re-acquire by the owner: %+v %v", again, err)
	}
	if err := ls.RenewLease(ctx, ws, sid, "epA", 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	// Released (or expired): another owner takes over with a new generation.
	if err := ls.ReleaseLease(ctx, ws, sid, "epA", 1); err != nil {
		t.Fatal(err)
	}
	if l, err := ls.GetLease(ctx, ws, sid); err != nil || l.Live || l.Owner != "epA" {
		t.Fatalf("released lease: %+v %v", l, err)
	}
	b, err = ls.AcquireLease(ctx, ws, sid, "epB", time.Hour)
	if err != nil || b.Owner != "epB" || b.Generation != 2 || b.TookOver != "epA" {
		t.Fatalf("take over: %+v %v", b, err)
	}
	if err := ls.RenewLease(ctx, ws, sid, "epA", 1, time.Hour); !errors.Is(err, host.ErrLeaseLost) {
		t.Fatalf("the stale owner renewed: %v", err)
	}
	// A release by the stale owner changes nothing.
	if err := ls.ReleaseLease(ctx, ws, sid, "epA", 1); err != nil {
		t.Fatal(err)
	}
	if l, err := ls.GetLease(ctx, ws, sid); err != nil || !l.Live || l.Owner != "epB" || l.Generation != 2 {
		t.Fatalf("after a stale release: %+v %v", l, err)
	}
	// An expiring lease: a zero-length one is not live.
	ws2 := uid("ws")
	if _, err := ls.AcquireLease(ctx, ws2, sid, "epA", 0); err != nil {
		t.Fatal(err)
	}
	if l, err := ls.AcquireLease(ctx, ws2, sid, "epB", time.Hour); err != nil || l.Owner != "epB" || l.TookOver != "epA" {
		t.Fatalf("take over an expired lease: %+v %v", l, err)
	}
}

func testLeaseFence(t *testing.T, st host.Store) {
	ctx := context.Background()
	ls := st
	ws, sid := uid("ws"), uid("ses")
	check := func(owner string, gen int64) error {
		return st.Update(ctx, func(tx host.Tx) error {
			return tx.CheckLease(ctx, ws, sid, owner, gen)
		})
	}
	if err := check("epA", 1); !errors.Is(err, host.ErrLeaseLost) {
		t.Fatalf("fence without a lease: %v", err)
	}
	if _, err := ls.AcquireLease(ctx, ws, sid, "epA", time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := check("epA", 1); err != nil {
		t.Fatalf("the owner is fenced out: %v", err)
	}
	if err := ls.ReleaseLease(ctx, ws, sid, "epA", 1); err != nil {
		t.Fatal(err)
	}
	if err := check("epA", 1); err != nil {
		t.Fatalf("an expired but not taken-over lease still admits its owner: %v", err)
	}
	if _, err := ls.AcquireLease(ctx, ws, sid, "epB", time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := check("epA", 1); !errors.Is(err, host.ErrLeaseLost) {
		t.Fatalf("the stale owner passed the fence: %v", err)
	}
	if err := check("epB", 2); err != nil {
		t.Fatalf("the new owner is fenced out: %v", err)
	}
}

func testLeaseConcurrent(t *testing.T, st host.Store) {
	ctx := context.Background()
	ls := st
	ws, sid := uid("ws"), uid("ses")
	const n = 16
	owners := make([]string, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			l, err := ls.AcquireLease(ctx, ws, sid, "ep"+string(rune('a'+i)), time.Hour)
			if err != nil {
				t.Error(err)
				return
			}
			owners[i] = l.Owner
		})
	}
	close(start)
	wg.Wait()
	winner := owners[0]
	for i, o := range owners {
		if o != winner {
			t.Fatalf("acquirer %d sees owner %q, acquirer 0 sees %q", i, o, winner)
		}
	}
	if l, err := ls.GetLease(ctx, ws, sid); err != nil || l.Owner != winner || l.Generation != 1 {
		t.Fatalf("lease: %+v %v (winner %q)", l, err, winner)
	}
}
