package sqlite

import (
	"strings"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// The relay marks hundreds of rows a second while output commits wait for
// the one writer: MarkPublished marks and prunes at most markBatch rows per
// statement, and prunes every row published over an hour ago however many
// there are, with no per-row trigger.
func TestMarkPublishedInBoundedStatements(t *testing.T) {
	st := openTemp(t)
	ctx := t.Context()
	var ids []int64
	err := st.Update(ctx, func(tx host.Tx) error {
		for range 2*markBatch + markBatch/2 {
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
	now := time.Now().UnixMilli()
	old, kept := now-2*publishedKept, now-publishedKept/2
	for range 2*markBatch + markBatch/2 {
		if _, err := st.w.ExecContext(ctx, `INSERT INTO outbox (workspace_id, fact_json, created_at, published_at)
			VALUES ('w', '{}', ?1, ?1)`, old); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.w.ExecContext(ctx, `INSERT INTO outbox (workspace_id, fact_json, created_at, published_at)
		VALUES ('w', '{}', ?1, ?1)`, kept); err != nil {
		t.Fatal(err)
	}

	before := st.marks.Load()
	if err := st.MarkPublished(ctx, ids); err != nil {
		t.Fatal(err)
	}
	// 250 rows to mark and 250 to prune: 100 + 100 + 50 each.
	if got := st.marks.Load() - before; got != 6 {
		t.Errorf("MarkPublished ran %d statements, want 6 (3 marking, 3 pruning)", got)
	}
	count := func(where string, args ...any) int {
		t.Helper()
		var n int
		if err := st.r.QueryRowContext(ctx, `SELECT count(*) FROM outbox WHERE `+where, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(`published_at IS NULL`); n != 0 {
		t.Errorf("%d rows left unpublished, want 0", n)
	}
	if n := count(`published_at < ?`, now-publishedKept); n != 0 {
		t.Errorf("%d rows published over an hour ago remain, want 0", n)
	}
	if n := count(`published_at = ?`, kept); n != 1 {
		t.Errorf("%d rows published half an hour ago remain, want 1", n)
	}
	if n := count(`published_at >= ?`, now); n != len(ids) {
		t.Errorf("%d rows marked now, want %d", n, len(ids))
	}
	var triggers int
	if err := st.r.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'outbox'`).Scan(&triggers); err != nil {
		t.Fatal(err)
	}
	if triggers != 0 {
		t.Errorf("%d triggers on outbox, want none (a per-row trigger runs for every marked row)", triggers)
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
