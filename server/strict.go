package server

import (
	"encoding"
	"encoding/json"
	"reflect"
	"strings"
	"sync"

	"github.com/ensemble-dev/ensemble/host"
)

// exactKeys rejects object keys that name a field only up to case.
// encoding/json matches keys case-insensitively, so without this
// {"sessionid": …} would fill SessionID — and on HTTP, where path
// variables are merged into the body's object, a body key differing in
// case from a path variable could override it. data has already decoded
// into a value of type t.
func exactKeys(data []byte, t reflect.Type) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if customJSON(t) {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		var m map[string]json.RawMessage
		if json.Unmarshal(data, &m) != nil {
			return nil // null: nothing to check
		}
		fields := jsonFields(t)
		for k, v := range m {
			ft, ok := fields[k]
			if !ok {
				return errorf(host.CodeInvalidInput, "input: unknown field %q", truncate(k, 64))
			}
			if err := exactKeys(v, ft); err != nil {
				return err
			}
		}
	case reflect.Slice, reflect.Array:
		if !hasStruct(t.Elem()) {
			return nil
		}
		var items []json.RawMessage
		if json.Unmarshal(data, &items) != nil {
			return nil
		}
		for _, it := range items {
			if err := exactKeys(it, t.Elem()); err != nil {
				return err
			}
		}
	case reflect.Map:
		if !hasStruct(t.Elem()) {
			return nil
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(data, &m) != nil {
			return nil
		}
		for _, v := range m {
			if err := exactKeys(v, t.Elem()); err != nil {
				return err
			}
		}
	}
	return nil
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// customJSON: the type decodes itself, so its keys are its own business.
func customJSON(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	return t.Implements(jsonUnmarshaler) || p.Implements(jsonUnmarshaler) ||
		t.Implements(textUnmarshaler) || p.Implements(textUnmarshaler)
}

func hasStruct(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		return !customJSON(t)
	case reflect.Slice, reflect.Array, reflect.Map:
		return hasStruct(t.Elem())
	}
	return false
}

var fieldCache sync.Map // reflect.Type → map[string]reflect.Type

// jsonFields maps each JSON key of struct t (embedded structs promoted)
// to its field type.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" && !strings.Contains(tag, ",") {
			continue
		}
		if f.Anonymous && name == "" {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range jsonFields(ft) {
					if _, dup := m[k]; !dup {
						m[k] = v
					}
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[name] = f.Type
	}
	fieldCache.Store(t, m)
	return m
}
