package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenurekit/tenure/internal/serveapi"
	"github.com/tenurekit/tenure/store/memstore"
)

func decodedDoc(t *testing.T) map[string]any {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

// filled returns a value of t with every field set (the first value of an
// enum the schema extras give), recursively: what encoding/json then
// writes names every member a value of t can have.
func filled(t reflect.Type, owner, field string) reflect.Value {
	v := reflect.New(t).Elem()
	if enum, ok := fieldExtras[owner+"."+field]["enum"].([]string); ok && t.Kind() == reflect.String {
		v.SetString(enum[0])
		return v
	}
	switch {
	case t == durationType:
		v.Set(reflect.ValueOf(serveapi.Duration(time.Second)))
		return v
	case t == timeType:
		v.Set(reflect.ValueOf(time.Date(2026, 12, 1, 15, 9, 55, 0, time.UTC)))
		return v
	case t == rawType:
		v.Set(reflect.ValueOf(json.RawMessage(`{}`)))
		return v
	}
	switch t.Kind() {
	case reflect.Pointer:
		v.Set(filled(t.Elem(), owner, field).Addr())
	case reflect.Slice:
		v.Set(reflect.Append(v, filled(t.Elem(), owner, field)))
	case reflect.Map:
		v.Set(reflect.MakeMap(t))
		v.SetMapIndex(filled(t.Key(), owner, field), filled(t.Elem(), owner, field))
	case reflect.Struct:
		name := capital(t.Name())
		for _, f := range jsonFields(t) {
			v.Field(f.index).Set(filled(f.typ, name, f.name))
		}
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	default:
		panic("no filled value of " + t.String())
	}
	return v
}

func members(t *testing.T, v any) []string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func schemaList(m map[string]any, key string) []string {
	var out []string
	switch l := m[key].(type) {
	case []any:
		for _, e := range l {
			out = append(out, e.(string))
		}
	case map[string]any:
		for k := range l {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// TestSchemasMatchEncodingJSON: each component schema of the document
// describes what encoding/json makes of its Go type: a value with every
// field set validates and writes exactly the schema's properties, and the
// zero value writes exactly its required members (those a response always
// carries and a request must give).
func TestSchemasMatchEncodingJSON(t *testing.T) {
	doc := decodedDoc(t)
	s := newSchemaSet()
	for _, o := range operations {
		s.operation(o.spec())
	}
	s.component(reflect.TypeFor[serveapi.Problem]())
	comps := doc["components"].(map[string]any)["schemas"].(map[string]any)
	if len(s.types) < 30 {
		t.Fatalf("only %d component types", len(s.types))
	}
	for name, typ := range s.types {
		sc := comps[name].(map[string]any)
		full := filled(typ, "", "").Interface()
		if got, want := members(t, full), schemaList(sc, "properties"); !slices.Equal(got, want) {
			t.Errorf("%s: a full value writes %v, the schema has the properties %v", name, got, want)
		}
		var v any
		b, _ := json.Marshal(full)
		json.Unmarshal(b, &v)
		if err := validateJSON(doc, ref(name), v, name); err != nil {
			t.Errorf("%s: a full value does not validate: %v\n%s", name, err, b)
		}
		if got, want := members(t, reflect.Zero(typ).Interface()), schemaList(sc, "required"); !slices.Equal(got, want) {
			t.Errorf("%s: the zero value writes %v, the schema requires %v", name, got, want)
		}
	}
}

// TestOperationsDeclared: each operation has a unique ID, a summary, an
// example, a store view and the success status of its output, and the
// server's mux routes its method and path to it (any other /v1 path to
// the not-found problem).
func TestOperationsDeclared(t *testing.T) {
	m, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Stores{Leases: m.Leases()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, o := range operations {
		d := o.spec()
		if ids[d.OperationID] {
			t.Errorf("operation ID %s twice", d.OperationID)
		}
		ids[d.OperationID] = true
		if d.doc == "" || d.needs.has == nil || reflect.ValueOf(d.example).IsZero() || !strings.HasPrefix(d.Path, "/v1/") {
			t.Errorf("%s: incomplete declaration %+v", d.OperationID, d)
		}
		if (d.status == http.StatusNoContent) != (d.out == reflect.TypeFor[noBody]()) {
			t.Errorf("%s: status %d for output %v", d.OperationID, d.status, d.out)
		}
		switch d.Method {
		case http.MethodGet:
			queryFields(d.in) // panics on a field without a query tag
		case http.MethodPost:
			if len(jsonFields(d.in)) == 0 {
				t.Errorf("%s: a body without fields", d.OperationID)
			}
		default:
			t.Errorf("%s: method %s", d.OperationID, d.Method)
		}
		if _, pattern := srv.mux.Handler(httptest.NewRequest(d.Method, d.Path, nil)); pattern != d.Method+" "+d.Path {
			t.Errorf("%s: the mux routes %s %s to %q", d.OperationID, d.Method, d.Path, pattern)
		}
		if _, ok := srv.handlers[d.OperationID]; !ok {
			t.Errorf("%s: no handler", d.OperationID)
		}
	}
	if len(ids) != 31 {
		t.Errorf("%d operations, want 31", len(ids))
	}
	if _, pattern := srv.mux.Handler(httptest.NewRequest("GET", "/v1/leases/nothing", nil)); pattern != "/v1/" {
		t.Errorf("an unknown route goes to %q", pattern)
	}
	if got, want := ReadOps, []string{"inspectLease", "listLeases", "fencedRead", "inspectIdempotency", "listSessions", "readSessionValue", "slotHistory"}; !slices.Equal(got, want) {
		t.Errorf("ReadOps %v, want %v", got, want)
	}
}
