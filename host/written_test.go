package host

import (
	"context"
	"testing"
	"time"
)

// writeOnlyTx accepts the writes writtenTx records and nothing else.
type writeOnlyTx struct{ Tx }

func (writeOnlyTx) UpdateTurn(context.Context, Turn) error       { return nil }
func (writeOnlyTx) UpdateSession(context.Context, Session) error { return nil }
func (writeOnlyTx) AdvanceTurn(context.Context, string, string, string, int64, time.Time) error {
	return nil
}
func (writeOnlyTx) AdvanceSession(context.Context, string, string, int64, time.Time) error {
	return nil
}

// A turn fact carries the Turn and session as the transaction last wrote
// them, the two columns an advance writes included.
func TestTurnFactCarriesTheAdvancedTurn(t *testing.T) {
	ctx := context.Background()
	t0 := time.UnixMilli(1_750_000_000_000).UTC()
	tu := Turn{WorkspaceID: "w", SessionID: "s", ID: "t", AppliedSeq: 2, UpdatedAt: t0}
	s := Session{WorkspaceID: "w", ID: "s", MessageVersion: 4, UpdatedAt: t0}
	w := &writtenTx{Tx: writeOnlyTx{}}
	if err := w.UpdateTurn(ctx, tu); err != nil {
		t.Fatal(err)
	}
	if err := w.UpdateSession(ctx, s); err != nil {
		t.Fatal(err)
	}
	at := t0.Add(time.Second)
	if err := w.AdvanceTurn(ctx, "w", "s", "t", 9, at); err != nil {
		t.Fatal(err)
	}
	if err := w.AdvanceSession(ctx, "w", "s", 7, at); err != nil {
		t.Fatal(err)
	}
	f := w.attach([]Fact{turnFact(tu)})[0]
	if f.Turn == nil || f.Turn.AppliedSeq != 9 || !f.Turn.UpdatedAt.Equal(at) {
		t.Fatalf("attached Turn = %+v, want applied seq 9 at %v", f.Turn, at)
	}
	if f.Session == nil || f.Session.MessageVersion != 7 || !f.Session.UpdatedAt.Equal(at) {
		t.Fatalf("attached session = %+v, want message version 7 at %v", f.Session, at)
	}
}
