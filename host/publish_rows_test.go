package host

import (
	"reflect"
	"testing"
)

// The facts of one transaction share an outbox row and its id: a row the
// fast path delivered gives the relay none of its facts, a row it missed
// gives all of them, and every id is forgotten afterwards.
func TestUndeliveredTakesRowsWhole(t *testing.T) {
	p := &publisher{delivered: map[int64]bool{7: true}}
	a := Fact{WorkspaceID: "w", Kind: FactTranscriptAdvanced, SessionID: "s", Version: 1}
	b := Fact{WorkspaceID: "w", Kind: FactSessionChanged, SessionID: "s", Version: 1}
	c := Fact{WorkspaceID: "w", Kind: FactTranscriptAdvanced, SessionID: "s", Version: 2}
	rows := []OutboxRow{{ID: 7, Fact: a}, {ID: 7, Fact: b}, {ID: 8, Fact: c}, {ID: 8, Fact: b}}
	if got, want := p.undelivered(rows), []Fact{c, b}; !reflect.DeepEqual(got, want) {
		t.Fatalf("undelivered = %+v, want row 8's two facts", got)
	}
	if len(p.delivered) != 0 {
		t.Fatalf("ids still remembered: %v", p.delivered)
	}
}
