package host_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/sqlite"
)

// countingObserver counts published facts and can be made to fail.
type countingObserver struct {
	mu    sync.Mutex
	n     int
	fail  bool
	facts []host.Fact
}

func (o *countingObserver) Publish(_ context.Context, facts []host.Fact) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.fail {
		return errors.New("bus down")
	}
	o.n += len(facts)
	o.facts = append(o.facts, facts...)
	return nil
}

func (o *countingObserver) count() int { o.mu.Lock(); defer o.mu.Unlock(); return o.n }

// describeOnly is a runtime for commands that never reach the provider.
type describeOnly struct{ host.Runtime }

func (describeOnly) Describe() host.AgentInfo { return host.AgentInfo{Name: "none"} }

// Two replicas' relays over one outbox: what one replica's fast path
// delivered is not republished by the other, and what it missed is
// republished once, by whichever relay runs first.
func TestRelayAcrossReplicasPublishesEachMissedFactOnce(t *testing.T) {
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "e.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	later := func() time.Time { return time.Now().Add(time.Hour) } // every row is past the relay delay
	obsA, obsB := &countingObserver{}, &countingObserver{}
	a := host.New(host.Config{Store: store, Runtime: describeOnly{}, Observer: obsA})
	b := host.New(host.Config{Store: store, Runtime: describeOnly{}, Observer: obsB, Now: later})

	for range 10 {
		if _, err := a.CreateSession(ctx, host.CreateSessionInput{WorkspaceID: "w"}); err != nil {
			t.Fatal(err)
		}
	}
	a.FlushPublish() // the fast path publishes asynchronously
	if obsA.count() != 10 {
		t.Fatalf("fast path published %d facts", obsA.count())
	}
	if err := a.RelayOnce(ctx); err != nil { // records what the fast path delivered
		t.Fatal(err)
	}
	if err := b.RelayOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if n := obsB.count(); n != 0 {
		t.Fatalf("the other replica's relay republished %d facts the fast path had delivered", n)
	}

	// The bus fails on A: its facts stay pending and B's relay publishes
	// them once; A's relay later finds nothing left.
	obsA.mu.Lock()
	obsA.fail = true
	obsA.mu.Unlock()
	for range 5 {
		if _, err := a.CreateSession(ctx, host.CreateSessionInput{WorkspaceID: "w"}); err != nil {
			t.Fatal(err)
		}
	}
	a.FlushPublish()
	if err := b.RelayOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.RelayOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if n := obsB.count(); n != 5 {
		t.Fatalf("B's relay published %d of the 5 missed facts", n)
	}
	obsA.mu.Lock()
	obsA.fail = false
	obsA.mu.Unlock()
	a2 := host.New(host.Config{Store: store, Runtime: describeOnly{}, Observer: obsA, Now: later})
	if err := a2.RelayOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if n := obsA.count(); n != 10 {
		t.Fatalf("A republished %d facts B had already relayed", n-10)
	}
}

// markRecorder records the ids the relay marks published.
type markRecorder struct {
	host.Store
	mu  sync.Mutex
	ids []int64
}

func (m *markRecorder) MarkPublished(ctx context.Context, ids []int64) error {
	m.mu.Lock()
	m.ids = append(m.ids, ids...)
	m.mu.Unlock()
	return m.Store.MarkPublished(ctx, ids)
}

// The relay publishes every fact of a row it took and marks the row
// published once, whatever the number of its facts.
func TestRelayMarksEachRowOnce(t *testing.T) {
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "e.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	rec := &markRecorder{Store: store}
	obs := &countingObserver{}
	later := func() time.Time { return time.Now().Add(time.Hour) }
	h := host.New(host.Config{Store: rec, Runtime: describeOnly{}, Observer: obs, Now: later})
	for r := range 3 { // three transactions of three facts: three rows
		if err := store.Update(ctx, func(tx host.Tx) error {
			_, err := tx.AppendFacts(ctx,
				host.Fact{WorkspaceID: "w", Kind: host.FactTranscriptAdvanced, SessionID: "s", Version: int64(3*r + 1)},
				host.Fact{WorkspaceID: "w", Kind: host.FactTranscriptAdvanced, SessionID: "s", Version: int64(3*r + 2)},
				host.Fact{WorkspaceID: "w", Kind: host.FactTranscriptAdvanced, SessionID: "s", Version: int64(3*r + 3)})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.RelayOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if n := obs.count(); n != 9 {
		t.Fatalf("relay published %d facts, want the 9 of the three rows", n)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	seen := map[int64]bool{}
	for _, id := range rec.ids {
		if seen[id] {
			t.Fatalf("row %d marked published twice: %v", id, rec.ids)
		}
		seen[id] = true
	}
	if len(seen) != 3 {
		t.Fatalf("marked rows %v, want 3", rec.ids)
	}
	if rows, err := store.PendingFacts(ctx, later(), 100); err != nil || len(rows) != 0 {
		t.Fatalf("still pending: %d rows, %v", len(rows), err)
	}
}
