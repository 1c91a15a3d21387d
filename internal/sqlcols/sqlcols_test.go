package sqlcols

import "testing"

func TestPrefixed(t *testing.T) {
	got := Prefixed("i.", "workspace_id, id,\n\tstate")
	if want := "i.workspace_id, i.id,\n\ti.state"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}
