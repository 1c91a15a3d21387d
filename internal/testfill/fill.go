// Package testfill sets every field of a value, recursively, to something
// other than its zero value, so a test can tell whether code that copies or
// compares the value looks at each field.
package testfill

import (
	"encoding/json"
	"reflect"
	"time"
)

// maxDepth bounds the recursion through pointers and slices.
const maxDepth = 6

// Fill sets v (settable) and every exported field below it to a non-zero
// value: strings "s", numbers 3, true, one fixed instant, slices of two
// (the first filled), maps of one entry, pointers to a filled value and a
// small JSON object for json.RawMessage.
func Fill(v reflect.Value) { fill(v, 0) }

func fill(v reflect.Value, depth int) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("s")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(3)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(3)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1.5)
	case reflect.Pointer:
		if depth < maxDepth {
			v.Set(reflect.New(v.Type().Elem()))
			fill(v.Elem(), depth+1)
		}
	case reflect.Slice:
		if v.Type() == reflect.TypeFor[json.RawMessage]() {
			v.SetBytes([]byte(`{"k":1}`))
			return
		}
		if depth < maxDepth {
			v.Set(reflect.MakeSlice(v.Type(), 2, 2))
			fill(v.Index(0), depth+1)
		}
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, depth+1)
		fill(e, depth+1)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), depth+1)
			}
		}
	}
}
