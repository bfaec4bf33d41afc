package server

import (
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tenurekit/tenure/internal/serveapi"
)

var (
	openapiOnce sync.Once
	openapiDoc  []byte
)

// OpenAPI returns the API's OpenAPI 3.1 document (served at
// /v1/openapi.json). It is made from the operations' declarations: their
// routes, summaries, and the schemas of their Go input and output types.
func OpenAPI() []byte {
	openapiOnce.Do(func() { openapiDoc = buildOpenAPI() })
	return openapiDoc
}

// commonProblems are the problem types every operation may answer with.
var commonProblems = []string{"unauthorized", "forbidden", "rate_limited", "invalid", "unavailable", "not_supported"}

func buildOpenAPI() []byte {
	s := newSchemaSet()
	s.comps["Duration"] = map[string]any{"type": "string", "description": `a Go duration string: "250ms", "30s", "1m30s"`, "examples": []string{"30s"}}
	s.component(reflect.TypeFor[serveapi.Problem]())
	paths := map[string]map[string]any{}
	for _, o := range operations {
		d := o.spec()
		if paths[d.Path] == nil {
			paths[d.Path] = map[string]any{}
		}
		paths[d.Path][strings.ToLower(d.Method)] = s.operation(d)
	}
	if len(s.unused) > 0 {
		panic("server: schema extras for no field: " + strings.Join(sortedKeys(s.unused), ", "))
	}
	// The unauthenticated endpoints.
	// They answer 4xx only as net/http does to a malformed request.
	plain := func(id, summary, ct, typ string) map[string]any {
		return map[string]any{"get": map[string]any{"operationId": id, "summary": summary, "security": []any{},
			"responses": map[string]any{
				"200": map[string]any{"description": "ok", "content": map[string]any{ct: map[string]any{"schema": map[string]any{"type": typ}}}},
				"4XX": map[string]any{"description": "the HTTP server's own answer to a malformed request (400; 431 for headers over 64 KiB)"},
			}}}
	}
	paths["/healthz"] = plain("health", "The process is up: \"ok\", then the server's version when it was given one.", "text/plain", "string")
	paths["/readyz"] = plain("ready", "The store answers (503 when it does not).", "text/plain", "string")
	paths["/readyz"]["get"].(map[string]any)["responses"].(map[string]any)["503"] = map[string]any{"description": "the store does not answer"}
	paths["/metrics"] = plain("metrics", "tenure's metrics in the Prometheus text format.", "text/plain", "string")
	paths["/v1/openapi.json"] = plain("openapi", "This document.", "application/json", "object")
	doc := map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{"title": "tenure serve", "version": "1",
			"description": "Leases with fencing tokens, fenced values, idempotency records, rate limits, sessions and slot history over HTTP. " +
				"Every operation calls the same library API a Go caller would; errors are application/problem+json with one type per tenure error."},
		"servers":    []any{map[string]any{"url": "/"}},
		"paths":      paths,
		"components": map[string]any{"schemas": s.comps, "securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer"}}},
		"security":   []any{map[string]any{"bearer": []string{}}},
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		panic(err)
	}
	return b
}

// operation returns the OpenAPI operation object of d.
func (s *schemaSet) operation(d opSpec) map[string]any {
	if d.doc == "" {
		panic("server: no summary for " + d.OperationID)
	}
	op := map[string]any{"operationId": d.OperationID, "summary": d.doc, "security": []any{map[string]any{"bearer": []string{}}}}
	if d.scope != "" {
		op["description"] = "The token's namespaces must cover " + d.scope + " (otherwise 403 forbidden)."
	}
	resp := map[string]any{}
	status := strconv.Itoa(d.status)
	if d.status == http.StatusNoContent {
		resp[status] = map[string]any{"description": "success, no body"}
	} else {
		resp[status] = map[string]any{"description": "success", "content": map[string]any{"application/json": map[string]any{"schema": s.of(d.out)}}}
	}
	problems := append(append([]string(nil), commonProblems...), d.problems...)
	if d.Method == http.MethodGet {
		op["parameters"] = s.parameters(d)
	} else {
		problems = append(problems, "too_large")
		op["requestBody"] = map[string]any{"required": true, "content": map[string]any{"application/json": map[string]any{
			"schema": s.request(d), "example": d.example}}}
	}
	for _, p := range problems {
		st, typ := problemStatus(p)
		if r, ok := resp[st].(map[string]any); ok {
			r["description"] = r["description"].(string) + ", " + typ
			continue
		}
		resp[st] = map[string]any{"description": typ, "content": map[string]any{serveapi.ProblemContentType: map[string]any{"schema": ref("Problem")}}}
	}
	op["responses"] = resp
	return op
}

// parameters returns the query parameters of a GET operation.
func (s *schemaSet) parameters(d opSpec) []any {
	ex := reflect.ValueOf(d.example)
	var params []any
	for _, f := range queryFields(d.in) {
		sc := s.field(d.in.Name(), f.name, f.typ, "")
		if f.def != "" {
			var v any = f.def
			if n, err := strconv.Atoi(f.def); err == nil && f.typ.Kind() == reflect.Int {
				v = n
			}
			sc["default"] = v
		}
		required := !f.optional || slices.Contains(d.required, f.name)
		if _, ok := sc["default"]; ok && required {
			panic("server: " + d.OperationID + ": query parameter " + f.name + " has a default and is required")
		}
		p := map[string]any{"name": f.name, "in": "query", "description": f.doc, "schema": sc, "required": required}
		if v := ex.Field(f.index); !v.IsZero() {
			if t, ok := v.Interface().(time.Time); ok {
				p["example"] = t.Format(time.RFC3339)
			} else {
				p["example"] = v.Interface()
			}
		}
		params = append(params, p)
	}
	return params
}

// problemStatus returns the status and type URI of a problem type's short
// name.
func problemStatus(name string) (string, string) {
	for _, k := range serveapi.Kinds {
		if k.Type == "urn:tenure:problem:"+name {
			return strconv.Itoa(k.Status), k.Type
		}
	}
	panic("server: unknown problem " + name)
}

func sortedKeys(m map[string]bool) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
