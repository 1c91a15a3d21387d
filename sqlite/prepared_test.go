package sqlite

import (
	"errors"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// The output transaction's reads and writes must run the statements
// prepared at Open, not parse their SQL again. To see which one runs, each
// prepared statement is swapped for a variant that matches no row: the
// transaction's calls then find nothing, which they can only when they go
// through the prepared statement.
func TestOutputStatementsArePrepared(t *testing.T) {
	st := openTemp(t)
	ctx := t.Context()
	now := time.UnixMilli(1_750_000_000_000).UTC()
	if err := st.Update(ctx, func(tx host.Tx) error {
		if err := tx.InsertSession(ctx, host.Session{WorkspaceID: "w", ID: "s", RootID: "s", CreatedAt: now, UpdatedAt: now}); err != nil {
			return err
		}
		return tx.InsertTurn(ctx, host.Turn{WorkspaceID: "w", SessionID: "s", ID: "t", Seq: 1,
			Phase: host.PhaseDurablyAccepted, CreatedAt: now, UpdatedAt: now})
	}); err != nil {
		t.Fatal(err)
	}
	noRow := map[string]string{
		expectOutputSQL:   expectOutputSQL + " AND 0",
		getTurnSQL:        getTurnSQL + " AND 0",
		getSessionSQL:     getSessionSQL + " AND 0",
		advanceTurnSQL:    advanceTurnSQL + " AND 0",
		advanceSessionSQL: advanceSessionSQL + " AND 0",
		updateTurnSQL:     updateTurnSQL + " AND 0",
		updateSessionSQL:  updateSessionSQL + " AND 0",
		insertFactSQL:     `INSERT INTO outbox (workspace_id, fact_json, created_at) SELECT ?, ?, ? WHERE 0`,
	}
	if len(noRow) != len(hotSQL) {
		t.Fatalf("hotSQL has %d statements, the test swaps %d", len(hotSQL), len(noRow))
	}
	for q, alt := range noRow {
		old := st.hot[q]
		if old == nil {
			t.Fatalf("not prepared at Open: %s", q)
		}
		swapped, err := st.w.PrepareContext(ctx, alt)
		if err != nil {
			t.Fatal(err)
		}
		st.hot[q] = swapped
		old.Close()
	}
	err := st.Update(ctx, func(tx host.Tx) error {
		if err := tx.ExpectOutput(ctx, "w", "s", "t", 0, 0); !errors.Is(err, host.ErrNotFound) {
			t.Errorf("ExpectOutput: %v, want not found from the swapped prepared statement", err)
		}
		if _, err := tx.Turn(ctx, "w", "s", "t"); !errors.Is(err, host.ErrNotFound) {
			t.Errorf("Turn: %v, want not found from the swapped prepared statement", err)
		}
		if _, err := tx.Session(ctx, "w", "s"); !errors.Is(err, host.ErrNotFound) {
			t.Errorf("Session: %v, want not found from the swapped prepared statement", err)
		}
		if err := tx.AdvanceTurn(ctx, "w", "s", "t", 1, now); !errors.Is(err, host.ErrNotFound) {
			t.Errorf("AdvanceTurn: %v, want not found from the swapped prepared statement", err)
		}
		if err := tx.AdvanceSession(ctx, "w", "s", 1, now); !errors.Is(err, host.ErrNotFound) {
			t.Errorf("AdvanceSession: %v, want not found from the swapped prepared statement", err)
		}
		tu := host.Turn{WorkspaceID: "w", SessionID: "s", ID: "t", Seq: 1, Phase: host.PhaseDurablyAccepted, CreatedAt: now, UpdatedAt: now}
		if err := tx.UpdateTurn(ctx, tu); !errors.Is(err, host.ErrNotFound) {
			t.Errorf("UpdateTurn: %v, want not found from the swapped prepared statement", err)
		}
		s := host.Session{WorkspaceID: "w", ID: "s", RootID: "s", CreatedAt: now, UpdatedAt: now}
		if err := tx.UpdateSession(ctx, s); !errors.Is(err, host.ErrNotFound) {
			t.Errorf("UpdateSession: %v, want not found from the swapped prepared statement", err)
		}
		_, err := tx.AppendFacts(ctx, host.Fact{WorkspaceID: "w", Kind: host.FactSessionChanged, SessionID: "s"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := st.r.QueryRowContext(ctx, "SELECT count(*) FROM outbox").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("outbox has %d rows: AppendFacts did not run the prepared insert", n)
	}
	// The store's own reads (the read pool) are untouched.
	if _, err := st.GetSession(ctx, "w", "s"); err != nil {
		t.Fatalf("GetSession through the read pool: %v", err)
	}
}
