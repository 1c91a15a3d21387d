package pg

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/host/storetest"
)

func TestTombstoneContract(t *testing.T) {
	url, _ := testSchema(t)
	storetest.RunTombstones(t, func(t *testing.T) host.Store { return openTest(t, url, Options{}) })
}

// Two stores (two replicas) cannot both hold the purge lock; once the
// holder releases it the other can take it.
func TestPurgeLockOneReplicaAtATime(t *testing.T) {
	url, _ := testSchema(t)
	a, b := openTest(t, url, Options{}), openTest(t, url, Options{})
	ctx := context.Background()
	release, ok, err := a.TryPurgeLock(ctx)
	if err != nil || !ok {
		t.Fatalf("first lock: ok=%v err=%v", ok, err)
	}
	if _, ok, err := b.TryPurgeLock(ctx); err != nil || ok {
		t.Fatalf("second replica took the held purge lock: ok=%v err=%v", ok, err)
	}
	release()
	release2, ok, err := b.TryPurgeLock(ctx)
	if err != nil || !ok {
		t.Fatalf("lock after release: ok=%v err=%v", ok, err)
	}
	release2()
}

// The purge lock is one per schema: a replica of a deployment in another
// schema of the same database (or a test running beside this one) takes
// its own while this one is held.
func TestPurgeLockIsPerSchema(t *testing.T) {
	urlA, _ := testSchema(t)
	urlB, _ := testSchema(t)
	a, b := openTest(t, urlA, Options{}), openTest(t, urlB, Options{})
	ctx := context.Background()
	release, ok, err := a.TryPurgeLock(ctx)
	if err != nil || !ok {
		t.Fatalf("lock in schema A: ok=%v err=%v", ok, err)
	}
	defer release()
	releaseB, ok, err := b.TryPurgeLock(ctx)
	if err != nil || !ok {
		t.Fatalf("schema B's purge waited for schema A's: ok=%v err=%v", ok, err)
	}
	releaseB()
}

// Two replicas run a retention pass over the same trees at the same time
// (without the purge lock, to prove the per-tree fence alone suffices):
// every tree is purged exactly once, by one of them.
func TestRetentionOnTwoReplicasPurgesEachTreeOnce(t *testing.T) {
	url, _ := testSchema(t)
	a, b := openTest(t, url, Options{}), openTest(t, url, Options{})
	ctx := context.Background()
	ws := host.RandomID("ws")
	old := time.Now().Add(-48 * time.Hour).UTC().Truncate(time.Millisecond)
	want := map[string]bool{}
	err := a.Update(ctx, func(tx host.Tx) error {
		for i := range 40 {
			root := host.Session{WorkspaceID: ws, ID: host.RandomID("ses"), Title: "t", CreatedAt: old, UpdatedAt: old}
			root.RootID = root.ID
			child := host.Session{WorkspaceID: ws, ID: host.RandomID("ses"), ParentID: root.ID, RootID: root.ID, CreatedAt: old, UpdatedAt: old}
			for _, s := range []host.Session{root, child} {
				if err := tx.InsertSession(ctx, s); err != nil {
					return err
				}
			}
			at := old.Add(time.Duration(i) * time.Millisecond)
			if err := tx.SetTombstone(ctx, ws, []string{root.ID, child.ID}, &host.Tombstone{DeletedAt: at,
				Generation: "g" + root.ID, ComponentRoot: root.ID, Restorable: true}); err != nil {
				return err
			}
			want[root.ID] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	hosts := []*host.Host{host.New(host.Config{Store: a}), host.New(host.Config{Store: b})}
	results := make([]host.PurgeResult, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = h.PurgeExpired(ctx, time.Hour)
		}()
	}
	wg.Wait()
	count := map[string]int{}
	for i, r := range results {
		if errs[i] != nil {
			t.Fatalf("replica %d: %v", i, errs[i])
		}
		for _, p := range r.Purged {
			if p.WorkspaceID == ws {
				count[p.RootSessionID]++
				if len(p.SessionIDs) != 2 {
					t.Fatalf("tree %s purged without its child: %v", p.RootSessionID, p.SessionIDs)
				}
			}
		}
	}
	for id := range want {
		if count[id] != 1 {
			t.Fatalf("tree %s purged %d times", id, count[id])
		}
	}
	t.Logf("replica A purged %d trees, B %d", len(results[0].Purged), len(results[1].Purged))
}
