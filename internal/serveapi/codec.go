package serveapi

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"sync"

	fastjson "github.com/segmentio/encoding/json"
)

// The API's bodies are encoded and decoded on every request, by the server
// and by the Go client: Marshal, Unmarshal and DecodeStrict do it with
// github.com/segmentio/encoding/json, which reads and writes the same JSON
// as encoding/json in a fraction of its time and allocations. Their errors
// are encoding/json's own: a body that does not decode is decoded again by
// encoding/json for the message, which never quotes the body (a body may
// carry a lease token).

// Marshal returns v's JSON, as encoding/json.Marshal writes it (HTML
// characters escaped, map keys sorted).
func Marshal(v any) ([]byte, error) {
	if omitsZero(reflect.TypeOf(v)) {
		return json.Marshal(v)
	}
	b, err := fastjson.Marshal(v)
	if err != nil {
		return json.Marshal(v)
	}
	return b, nil
}

// Unmarshal decodes b into v as encoding/json.Unmarshal does.
func Unmarshal(b []byte, v any) error {
	if err := fastjson.Unmarshal(b, v); err != nil {
		reset(v)
		return json.Unmarshal(b, v)
	}
	return nil
}

// reset sets what v points to back to its zero value, so that
// encoding/json reads into it afresh what the fast decoder left half read.
func reset(v any) {
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && !rv.IsNil() {
		rv.Elem().SetZero()
	}
}

// DecodeStrict decodes the one JSON value in b into v, refusing fields v
// does not have and anything but white space after the value: an
// encoding/json Decoder with DisallowUnknownFields, then a check that no
// other value follows. An empty b is io.EOF.
func DecodeStrict(b []byte, v any) error {
	if len(bytes.TrimSpace(b)) > 0 {
		rest, err := fastjson.Parse(b, v, fastjson.DisallowUnknownFields)
		if err == nil && len(bytes.TrimSpace(rest)) == 0 {
			return nil
		}
	}
	// The message, and what v holds, as encoding/json has them.
	reset(v)
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errTrailing
	}
	// encoding/json accepted what the fast decoder refused: v holds
	// encoding/json's reading.
	return nil
}

// errTrailing is a body with data after its JSON value.
var errTrailing = trailingError{}

type trailingError struct{}

func (trailingError) Error() string { return "data after the JSON value" }

// omitZero caches omitsZero's answers (reflect.Type -> bool).
var omitZero sync.Map

// omitsZero reports whether t, or a type within it, has a field tagged
// omitzero, which only encoding/json leaves out.
func omitsZero(t reflect.Type) bool {
	if t == nil {
		return false
	}
	if v, ok := omitZero.Load(t); ok {
		return v.(bool)
	}
	v := findOmitZero(t, map[reflect.Type]bool{})
	omitZero.Store(t, v)
	return v
}

func findOmitZero(t reflect.Type, seen map[reflect.Type]bool) bool {
	if seen[t] {
		return false
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
		if t.Kind() == reflect.Map && findOmitZero(t.Key(), seen) {
			return true
		}
		return findOmitZero(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if _, opts, _ := strings.Cut(f.Tag.Get("json"), ","); strings.Contains(","+opts+",", ",omitzero,") {
				return true
			}
			if findOmitZero(f.Type, seen) {
				return true
			}
		}
	}
	return false
}
