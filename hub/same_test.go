package hub

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/internal/testfill"
)

// checkEveryField: changing any one field of a zero T makes eq report a
// change, except the fields named in ignored (which must exist). So a new
// domain field is a change trigger unless someone decides otherwise here.
func checkEveryField[T any](t *testing.T, eq func(a, b T) bool, ignored ...string) {
	t.Helper()
	var zero T
	typ := reflect.TypeOf(zero)
	for _, name := range ignored {
		if _, ok := typ.FieldByName(name); !ok {
			t.Errorf("%s has no field %s", typ, name)
		}
	}
	for i := range typ.NumField() {
		f := typ.Field(i)
		var changed T
		testfill.Fill(reflect.ValueOf(&changed).Elem().Field(i))
		if got := !eq(zero, changed); got == slices.Contains(ignored, f.Name) {
			t.Errorf("%s.%s: change detected %v", typ, f.Name, got)
		}
	}
}

func TestSameSeesEveryWireField(t *testing.T) {
	checkEveryField(t, sameSummary, "MessageVersion", "UpdatedAt", "Provisional")
	checkEveryField(t, sameTurn, "AppliedSeq")
	checkEveryField(t, sameShape, "Version", "UpdatedAt")
	checkEveryField(t, func(a, b host.Interaction) bool { return same(a, b) })

	var a, b host.Message
	b.Content.Text = "appended"
	if !sameShape(a, b) {
		t.Error("an append changed the message's shape")
	}
	b.Content.DisplayText = "x"
	if sameShape(a, b) {
		t.Error("a display text change went unseen")
	}
}

func TestSameComparesInstantsAndNil(t *testing.T) {
	at := time.Unix(1_700_000_000, 0)
	if !same(host.Session{CreatedAt: at.UTC()}, host.Session{CreatedAt: at.In(time.FixedZone("x", 3600))}) {
		t.Error("the same instant in another location is a change")
	}
	if !same(host.Interaction{Options: nil}, host.Interaction{Options: []host.InteractionOption{}}) {
		t.Error("nil and empty options (both: none) are a change")
	}
	if same(host.Interaction{}, host.Interaction{Options: []host.InteractionOption{{ID: "allow"}}}) {
		t.Error("an added option went unseen")
	}
	if same(host.Session{Settings: map[string]string{"a": "1"}}, host.Session{Settings: map[string]string{"a": "2"}}) {
		t.Error("a changed setting went unseen")
	}
}
