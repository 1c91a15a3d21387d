package hub

import (
	"reflect"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// Change detection compares domain values, not their encoding: a reread
// emits an event when the value differs from the one last emitted. same
// is deep equality with two rules that match what a client can tell
// apart: instants compare with time.Equal (a store may hand back another
// location for the same instant), and a nil slice or map equals an empty
// one (a store may read either for "none"; an event for that would only
// repeat what the client holds).
func same(a, b any) bool { return sameValue(reflect.ValueOf(a), reflect.ValueOf(b)) }

var timeType = reflect.TypeFor[time.Time]()

func sameValue(a, b reflect.Value) bool {
	if a.IsValid() != b.IsValid() {
		return false
	}
	if !a.IsValid() {
		return true
	}
	if a.Type() != b.Type() {
		return false
	}
	switch a.Kind() {
	case reflect.Struct:
		if a.Type() == timeType {
			return a.Interface().(time.Time).Equal(b.Interface().(time.Time))
		}
		for i := range a.NumField() {
			if !sameValue(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return sameValue(a.Elem(), b.Elem())
	case reflect.Slice:
		if a.Len() != b.Len() {
			return false
		}
		fallthrough
	case reflect.Array:
		for i := range a.Len() {
			if !sameValue(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Map:
		if a.Len() != b.Len() {
			return false
		}
		for it := a.MapRange(); it.Next(); {
			bv := b.MapIndex(it.Key())
			if !bv.IsValid() || !sameValue(it.Value(), bv) {
				return false
			}
		}
		return true
	case reflect.String:
		return a.String() == b.String()
	case reflect.Bool:
		return a.Bool() == b.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return a.Int() == b.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return a.Uint() == b.Uint()
	case reflect.Float32, reflect.Float64:
		return a.Float() == b.Float()
	}
	// Funcs, channels and the like are not state a client sees.
	return true
}

// sameSummary ignores what every streamed token bumps (MessageVersion,
// UpdatedAt), so watchers get a session_summary for real changes (title,
// pin, active turn …) only; Provisional is the Host's own bookkeeping.
func sameSummary(a, b host.Session) bool {
	a.MessageVersion, a.UpdatedAt, a.Provisional = 0, time.Time{}, false
	b.MessageVersion, b.UpdatedAt, b.Provisional = 0, time.Time{}, false
	return same(a, b)
}

// sameTurn ignores AppliedSeq, the Host's record of applied sink events.
func sameTurn(a, b host.Turn) bool {
	a.AppliedSeq, b.AppliedSeq = 0, 0
	return same(a, b)
}

// sameShape compares two messages without the fields an append changes.
func sameShape(a, b host.Message) bool {
	a.Content.Text, a.Version, a.UpdatedAt = "", 0, time.Time{}
	b.Content.Text, b.Version, b.UpdatedAt = "", 0, time.Time{}
	return same(a, b)
}
