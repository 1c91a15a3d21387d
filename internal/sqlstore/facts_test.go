package sqlstore

import (
	"reflect"
	"testing"

	"github.com/ensemble-dev/ensemble/host"
)

// A transaction's facts of one workspace make one row; a lone fact keeps
// the object every row held before rows grouped facts, so rows written by
// an older build decode the same.
func TestFactRowsRoundTrip(t *testing.T) {
	a := host.Fact{WorkspaceID: "w1", Kind: host.FactTranscriptAdvanced, SessionID: "s", Version: 3}
	b := host.Fact{WorkspaceID: "w1", Kind: host.FactSessionChanged, SessionID: "s"}
	c := host.Fact{WorkspaceID: "w2", Kind: host.FactSessionChanged, SessionID: "s2"}
	rows, err := FactRows([]host.Fact{a, b, c})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].WorkspaceID != "w1" || rows[0].Facts != 2 || rows[1].WorkspaceID != "w2" || rows[1].Facts != 1 {
		t.Fatalf("rows = %+v, want w1 with 2 facts and w2 with 1", rows)
	}
	if rows[1].JSON[0] != '{' {
		t.Fatalf("a lone fact is %s, want its object", rows[1].JSON)
	}
	if ids := FactIDs(rows, []int64{10, 11}); !reflect.DeepEqual(ids, []int64{10, 10, 11}) {
		t.Fatalf("FactIDs = %v", ids)
	}
	for i, want := range [][]host.Fact{{a, b}, {c}} {
		got, err := decodeFacts(rows[i].JSON)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("row %d decodes to %+v, %v; want %+v", i, got, err, want)
		}
	}
	for _, bad := range []string{"[]", "[{]", "{"} {
		if _, err := decodeFacts(bad); err == nil {
			t.Fatalf("%q decoded", bad)
		}
	}
}
