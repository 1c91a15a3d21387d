package sqlite

import (
	"strings"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// The relay marks hundreds of rows a second while output commits wait for
// the one writer: MarkPublished deletes the delivered rows, at most
// markBatch per statement, and leaves every other row pending.
func TestMarkPublishedInBoundedStatements(t *testing.T) {
	st := openTemp(t)
	ctx := t.Context()
	var ids []int64
	err := st.Update(ctx, func(tx host.Tx) error {
		for range 2*markBatch + markBatch/2 + 1 {
			got, err := tx.AppendFacts(ctx, host.Fact{WorkspaceID: "w", SessionID: "s", Kind: host.FactSessionChanged})
			if err != nil {
				return err
			}
			ids = append(ids, got...)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	delivered, pending := ids[:len(ids)-1], ids[len(ids)-1]

	before := st.marks.Load()
	if err := st.MarkPublished(ctx, delivered); err != nil {
		t.Fatal(err)
	}
	// 250 rows: 100 + 100 + 50.
	if got := st.marks.Load() - before; got != 3 {
		t.Errorf("MarkPublished ran %d statements, want 3", got)
	}
	rows, err := st.PendingFacts(ctx, time.Now(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].ID != pending {
		t.Errorf("pending after marking: %+v, want only row %d", rows, pending)
	}
	var n int
	if err := st.r.QueryRowContext(ctx, `SELECT count(*) FROM outbox`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("%d outbox rows, want 1: delivered rows are deleted", n)
	}
	var triggers int
	if err := st.r.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'outbox'`).Scan(&triggers); err != nil {
		t.Fatal(err)
	}
	if triggers != 0 {
		t.Errorf("%d triggers on outbox, want none (a per-row trigger runs for every marked row)", triggers)
	}

	// Ids are never reused once rows are deleted (AUTOINCREMENT): the
	// publisher and the relay remember delivered and claimed rows by id.
	if err := st.MarkPublished(ctx, []int64{pending}); err != nil {
		t.Fatal(err)
	}
	err = st.Update(ctx, func(tx host.Tx) error {
		got, err := tx.AppendFacts(ctx, host.Fact{WorkspaceID: "w", SessionID: "s", Kind: host.FactSessionChanged})
		if err == nil && got[0] <= pending {
			t.Errorf("a fact appended to the emptied outbox got id %d, not above %d", got[0], pending)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// BenchmarkMarkPublished marks what the relay marks in one pass at the
// fanout shape: ≈ 600 rows the fast path delivered in the last second.
func BenchmarkMarkPublished(b *testing.B) {
	st := openTemp(b)
	ctx := b.Context()
	fact := host.Fact{WorkspaceID: "w", SessionID: "s", Kind: host.FactSessionChanged, TurnID: strings.Repeat("t", 400)}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		var ids []int64
		for range 600 {
			err := st.Update(ctx, func(tx host.Tx) error {
				got, err := tx.AppendFacts(ctx, fact)
				ids = append(ids, got...)
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		if err := st.MarkPublished(ctx, ids); err != nil {
			b.Fatal(err)
		}
	}
}
