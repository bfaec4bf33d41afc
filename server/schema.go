package server

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	idemdriver "github.com/tenurekit/tenure/idempotency/driver"
	"github.com/tenurekit/tenure/internal/serveapi"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/schedule"
)

// schemaSet makes the JSON schemas of Go types for the OpenAPI document:
// a component per named struct, whose properties are the fields by their
// JSON names, described by their doc tags, and whose required list is
// the fields without omitempty or omitzero.
type schemaSet struct {
	comps map[string]any
	types map[string]reflect.Type
	// extras not yet used, to catch one that names no field.
	unused map[string]bool
}

func newSchemaSet() *schemaSet {
	s := &schemaSet{comps: map[string]any{}, types: map[string]reflect.Type{}, unused: map[string]bool{}}
	for k := range fieldExtras {
		s.unused[k] = true
	}
	return s
}

var (
	durationType = reflect.TypeFor[serveapi.Duration]()
	bytesType    = reflect.TypeFor[[]byte]()
	rawType      = reflect.TypeFor[json.RawMessage]()
)

// fieldExtras are the schema keywords of fields that the Go types do not
// carry, taken from the code that judges them: "Schema.field" (a
// component's name) or "query.param" (a GET operation's query type). A
// field with a "default" is one the server fills in: it must be optional
// (omitempty or omitzero) and no operation may require it, so that
// clients generated from the document may leave it out.
var fieldExtras = map[string]map[string]any{
	"RateRequest.algorithm":  {"enum": algorithmNames(), "default": ratelimit.GCRA.String()},
	"RateRequest.n":          {"default": 1},
	"AcquireLease.wait":      {"default": "0s"},
	"AcquireLease.stay":      {"default": "0s"},
	"IdemBegin.claim_ttl":    {"default": DefaultIdemClaimTTL.String()},
	"IdemBegin.retention":    {"default": DefaultIdemRetention.String()},
	"RateDecision.algorithm": {"enum": algorithmNames()},
	"RateAllow.requests":     {"minItems": 1, "maxItems": ratelimit.MaxGroup},
	"RateReset.requests":     {"minItems": 1, "maxItems": ratelimit.MaxGroup},
	"IdemBegun.state":        {"enum": idemStates()},
	"SlotRecord.state":       {"enum": []string{string(schedule.Running), string(schedule.Done), string(schedule.Failed), string(schedule.Skipped), string(schedule.Missed)}},
	"SlotAttempt.outcome":    {"enum": []string{string(schedule.AttemptRunning), string(schedule.AttemptDone), string(schedule.AttemptFailed), string(schedule.AttemptSuperseded)}},
	"listLeasesQuery.limit":  {"minimum": 1, "maximum": leasedriver.MaxListLimit},
	"slotHistoryQuery.limit": {"minimum": 1, "maximum": maxSlotPage},
}

// algorithmNames are the wire names of the rate limit algorithms.
func algorithmNames() []string {
	var names []string
	for n := range algorithms {
		if n != "" {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// idemStates are the names of the answers to a begin.
func idemStates() []string {
	var names []string
	for st := idemdriver.Claimed; st <= idemdriver.Mismatch; st++ {
		names = append(names, st.String())
	}
	return names
}

// jsonField is a field of a struct as encoding/json writes it.
type jsonField struct {
	name     string
	optional bool
	doc      string
	typ      reflect.Type
	index    int
}

// jsonFields returns the exported fields of struct type t that
// encoding/json reads and writes.
func jsonFields(t reflect.Type) []jsonField {
	var fs []jsonField
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if !f.IsExported() || tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		optional := slices.ContainsFunc(strings.Split(opts, ","), func(o string) bool { return o == "omitempty" || o == "omitzero" })
		fs = append(fs, jsonField{name: name, optional: optional, doc: f.Tag.Get("doc"), typ: f.Type, index: i})
	}
	return fs
}

// of returns the schema of a value of type t.
func (s *schemaSet) of(t reflect.Type) map[string]any {
	switch {
	case t == durationType:
		return ref("Duration")
	case t == timeType:
		return map[string]any{"type": "string", "format": "date-time"}
	case t == bytesType:
		return map[string]any{"type": "string", "contentEncoding": "base64"}
	case t == rawType:
		return map[string]any{"type": "object"}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return s.of(t.Elem())
	case reflect.Slice:
		return map[string]any{"type": "array", "items": s.of(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": s.of(t.Elem())}
	case reflect.Struct:
		return ref(s.component(t))
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return map[string]any{"type": "integer"}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer", "minimum": 0}
	}
	panic("server: no schema for " + t.String())
}

// component adds the schema of struct type t, named by the type's name
// with a capital first letter, and returns the name.
func (s *schemaSet) component(t reflect.Type) string {
	name := capital(t.Name())
	if prev, ok := s.types[name]; ok {
		if prev != t {
			panic("server: two schemas named " + name)
		}
		return name
	}
	s.types[name] = t
	props := map[string]any{}
	var required []string
	for _, f := range jsonFields(t) {
		props[f.name] = s.field(name, f.name, f.typ, f.doc)
		if !f.optional {
			if _, ok := fieldExtras[name+"."+f.name]["default"]; ok {
				panic("server: " + name + "." + f.name + " has a default and is required (give it omitempty)")
			}
			required = append(required, f.name)
		}
	}
	s.comps[name] = obj(required, props)
	return name
}

// field returns the schema of the field of schema owner: its type's, with
// its description and extras.
func (s *schemaSet) field(owner, name string, t reflect.Type, doc string) map[string]any {
	p := s.of(t)
	if doc != "" {
		p["description"] = doc
	}
	key := owner + "." + name
	for k, v := range fieldExtras[key] {
		p[k] = v
	}
	delete(s.unused, key)
	return p
}

// request returns the schema of an operation's request body: its input
// type's, with the operation's own required fields and alternatives.
func (s *schemaSet) request(d opSpec) map[string]any {
	base := s.of(d.in)
	if len(d.required) == 0 && len(d.oneOf) == 0 {
		return base
	}
	// Each constraint names the members it requires under properties
	// (schema {}: the member's own schema is the input type's), so that
	// the constraint is a schema on its own.
	c := map[string]any{}
	for _, p := range d.required {
		parent, leaf := splitPath(d, p)
		if hasDefault(d, p) {
			panic("server: " + d.OperationID + " requires " + p + ", which has a server default")
		}
		n := node(c, parent)
		req, _ := n["required"].([]string)
		n["required"] = append(req, leaf)
		child(n, "properties")[leaf] = map[string]any{}
	}
	for _, g := range d.oneOf {
		var alts []any
		parent := ""
		for i, alt := range g {
			var fields []string
			props := map[string]any{}
			for _, f := range strings.Split(alt, "+") {
				par, leaf := splitPath(d, f)
				if i == 0 && len(fields) == 0 {
					parent = par
				} else if par != parent {
					panic("server: " + d.OperationID + ": alternatives under different objects")
				}
				fields = append(fields, leaf)
				props[leaf] = map[string]any{}
			}
			alts = append(alts, map[string]any{"required": fields, "properties": props})
		}
		n := node(c, parent)
		if n["oneOf"] != nil {
			panic("server: " + d.OperationID + ": two groups of alternatives under one object")
		}
		n["oneOf"] = alts
	}
	return map[string]any{"allOf": []any{base, c}}
}

// hasDefault reports whether the field at path (as splitPath takes it)
// of d's input has a server default (a "default" in fieldExtras).
func hasDefault(d opSpec, path string) bool {
	t := d.in
	segs := strings.Split(path, ".")
	for i, seg := range segs {
		name, _ := strings.CutSuffix(seg, "[]")
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
			t = t.Elem()
		}
		fs := jsonFields(t)
		j := slices.IndexFunc(fs, func(f jsonField) bool { return f.name == name })
		if j < 0 {
			return false
		}
		if i == len(segs)-1 {
			_, ok := fieldExtras[capital(t.Name())+"."+name]["default"]
			return ok
		}
		t = fs[j].typ
	}
	return false
}

// splitPath checks that path names a field of d's input and returns the
// path of its object and its name.
func splitPath(d opSpec, path string) (parent, leaf string) {
	t := d.in
	for seg := range strings.SplitSeq(path, ".") {
		name, array := strings.CutSuffix(seg, "[]")
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			panic("server: " + d.OperationID + ": " + path + " goes into a " + t.String())
		}
		i := slices.IndexFunc(jsonFields(t), func(f jsonField) bool { return f.name == name })
		if i < 0 {
			panic("server: " + d.OperationID + ": no field " + path)
		}
		t = jsonFields(t)[i].typ
		if array {
			if t.Kind() != reflect.Slice {
				panic("server: " + d.OperationID + ": " + path + ": " + name + " is not an array")
			}
			t = t.Elem()
		}
	}
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		return path[:i], path[i+1:]
	}
	return "", path
}

// node returns the schema in c that constrains the object at path,
// making it on the way.
func node(c map[string]any, path string) map[string]any {
	if path == "" {
		return c
	}
	for seg := range strings.SplitSeq(path, ".") {
		name, array := strings.CutSuffix(seg, "[]")
		c = child(child(c, "properties"), name)
		if array {
			c = child(c, "items")
		}
	}
	return c
}

func child(m map[string]any, key string) map[string]any {
	c, ok := m[key].(map[string]any)
	if !ok {
		c = map[string]any{}
		m[key] = c
	}
	return c
}

func capital(s string) string {
	r, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToUpper(r)) + s[n:]
}

func obj(required []string, props map[string]any) map[string]any {
	m := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		m["required"] = required
	}
	return m
}

func ref(name string) map[string]any { return map[string]any{"$ref": "#/components/schemas/" + name} }
