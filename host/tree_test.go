package host

import (
	"context"
	"testing"
)

// latestTx is a Tx whose only method is LatestTurn; it counts the reads.
type latestTx struct {
	Tx
	latest Turn
	reads  int
}

func (tx *latestTx) LatestTurn(context.Context, string, string) (Turn, error) {
	tx.reads++
	return tx.latest, nil
}

// TestEmitTreeAt: the tree fact names the root's latest Turn; emitTreeAt
// reads it only when the Turn it holds may not be that one.
func TestEmitTreeAt(t *testing.T) {
	root := Session{WorkspaceID: "ws", ID: "root", RootID: "root", TurnCount: 3}
	child := Session{WorkspaceID: "ws", ID: "child", RootID: "root", TurnCount: 1}
	cases := []struct {
		name      string
		s         Session
		held      Turn
		stored    Turn // what LatestTurn returns
		wantTurn  string
		wantReads int
	}{
		{"the held turn is the root's latest", root,
			Turn{SessionID: "root", ID: "t3", Seq: 3}, Turn{ID: "t3", Seq: 3}, "t3", 0},
		{"a later turn was admitted", root,
			Turn{SessionID: "root", ID: "t2", Seq: 2}, Turn{ID: "t3", Seq: 3}, "t3", 1},
		{"a child's turn: the root's latest is read", child,
			Turn{SessionID: "child", ID: "c1", Seq: 1}, Turn{ID: "t3", Seq: 3}, "t3", 1},
		{"no turn held", root, Turn{}, Turn{ID: "t3", Seq: 3}, "t3", 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tx := &latestTx{latest: c.stored}
			var got []Fact
			if err := emitTreeAt(t.Context(), tx, func(f ...Fact) { got = append(got, f...) }, c.s, c.held); err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || got[0].Kind != FactInteractionTreeDirty || got[0].SessionID != "root" || got[0].TurnID != c.wantTurn {
				t.Fatalf("facts = %+v, want one tree fact for root naming %s", got, c.wantTurn)
			}
			if tx.reads != c.wantReads {
				t.Fatalf("LatestTurn reads = %d, want %d", tx.reads, c.wantReads)
			}
		})
	}
}
