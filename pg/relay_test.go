package pg

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// Relays on two replicas claim the same outbox concurrently: each missed
// fact goes to exactly one of them, nothing is handed out again while its
// lease lasts, a published row never comes back, and an expired lease makes
// an unpublished row claimable again.
func TestClaimFactsLeasesDisjointRows(t *testing.T) {
	url, _ := testSchema(t)
	a, b := openTest(t, url, Options{}), openTest(t, url, Options{})
	ctx := context.Background()
	const n = 60
	for i := range n {
		err := a.Update(ctx, func(tx host.Tx) error {
			_, err := tx.AppendFacts(ctx, host.Fact{WorkspaceID: "w", Kind: host.FactTranscriptAdvanced, SessionID: "s", Version: int64(i + 1)})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	later := time.Now().Add(time.Hour)
	var mu sync.Mutex
	seen := map[int64]int{}
	var wg sync.WaitGroup
	for _, st := range []*Store{a, b, a, b} {
		wg.Go(func() {
			for {
				rows, err := st.ClaimFacts(ctx, later, 7, time.Hour)
				if err != nil {
					t.Error(err)
					return
				}
				if len(rows) == 0 {
					return
				}
				mu.Lock()
				for _, r := range rows {
					seen[r.ID]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("claimed %d distinct rows of %d", len(seen), n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Fatalf("row %d claimed %d times", id, k)
		}
	}

	// Publish half; let the other half's lease lapse by claiming them with a
	// zero lease: only the unpublished ones come back, oldest first.
	var ids []int64
	for id := range seen {
		ids = append(ids, id)
	}
	if err := a.MarkPublished(ctx, ids[:n/2]); err != nil {
		t.Fatal(err)
	}
	if _, err := a.pool.Exec(ctx, `UPDATE outbox SET claimed_until = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	rows, err := b.ClaimFacts(ctx, later, 1000, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != n/2 {
		t.Fatalf("after the leases lapsed %d rows came back, want %d", len(rows), n/2)
	}
	for i := 1; i < len(rows); i++ {
		if rows[i].Fact.Version < rows[i-1].Fact.Version {
			t.Fatalf("not oldest first: %d after %d", rows[i].Fact.Version, rows[i-1].Fact.Version)
		}
	}
	if again, err := a.ClaimFacts(ctx, later, 1000, time.Hour); err != nil || len(again) != 0 {
		t.Fatalf("rows under a live lease handed out again: %d %v", len(again), err)
	}
}
