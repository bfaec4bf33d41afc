package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenurekit/tenure/internal/serveapi"
	scheddriver "github.com/tenurekit/tenure/schedule/driver"
	"github.com/tenurekit/tenure/server"
)

type openapiDoc struct {
	OpenAPI string                           `json:"openapi"`
	Paths   map[string]map[string]openapiOp  `json:"paths"`
	Comp    struct{ Schemas map[string]any } `json:"components"`
}

type openapiOp struct {
	OperationID string                    `json:"operationId"`
	Summary     string                    `json:"summary"`
	Responses   map[string]openapiContent `json:"responses"`
	RequestBody *openapiContent           `json:"requestBody"`
	Parameters  []struct {
		Name     string `json:"name"`
		Required bool   `json:"required"`
		Example  any    `json:"example"`
	} `json:"parameters"`
}

type openapiContent struct {
	Content map[string]struct {
		Schema  any `json:"schema"`
		Example any `json:"example"`
	} `json:"content"`
}

// loadDoc returns the document, typed and as decoded JSON (for
// server.ValidateJSON).
func loadDoc(t *testing.T) (openapiDoc, map[string]any) {
	t.Helper()
	var d openapiDoc
	var raw map[string]any
	if err := json.Unmarshal(server.OpenAPI(), &d); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(server.OpenAPI(), &raw); err != nil {
		t.Fatal(err)
	}
	return d, raw
}

// TestOpenAPIDescribesEveryRoute: every route is documented under its
// method, path and operation ID with a summary, every documented
// operation is a route, operation IDs are unique, every schema reference
// resolves, and every example is valid by its schema.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	d, raw := loadDoc(t)
	if d.OpenAPI != "3.1.0" {
		t.Fatalf("openapi %q", d.OpenAPI)
	}
	routes := server.Routes()
	for _, rt := range routes {
		op, ok := d.Paths[rt.Path][strings.ToLower(rt.Method)]
		if !ok || op.OperationID != rt.OperationID || op.Summary == "" {
			t.Errorf("%s %s (%s) not documented: %+v", rt.Method, rt.Path, rt.OperationID, op)
		}
		if (rt.Method == "POST") != (op.RequestBody != nil) {
			t.Errorf("%s: request body documented %v for %s", rt.OperationID, op.RequestBody != nil, rt.Method)
		}
		if _, ok := op.Responses["401"]; !ok {
			t.Errorf("%s: no 401 documented", rt.OperationID)
		}
		if op.RequestBody != nil {
			c := op.RequestBody.Content["application/json"]
			if err := server.ValidateJSON(raw, c.Schema, c.Example, rt.OperationID); err != nil {
				t.Errorf("example: %v", err)
			}
		}
	}
	seen := map[string]bool{}
	unauth := []string{"health", "ready", "metrics", "openapi"}
	for path, ops := range d.Paths {
		for method, op := range ops {
			if seen[op.OperationID] {
				t.Errorf("operation ID %s twice", op.OperationID)
			}
			seen[op.OperationID] = true
			if slices.Contains(unauth, op.OperationID) {
				continue
			}
			if !slices.ContainsFunc(routes, func(r server.Route) bool {
				return r.Path == path && strings.ToLower(r.Method) == method && r.OperationID == op.OperationID
			}) {
				t.Errorf("documented %s %s (%s) is not a route", method, path, op.OperationID)
			}
		}
	}
	for _, id := range []string{"acquireLease", "renewLease", "releaseLease", "leaveLeaseQueue", "inspectLease", "listLeases", "fencedHolderWrite", "fencedWrite", "fencedRead",
		"beginIdempotency", "completeIdempotency", "releaseIdempotency", "allowRate", "acquirePermit", "releasePermit",
		"createSession", "loadSession", "saveSession", "revokeSession", "listSessions", "revokeUserSessions",
		"writeSessionValue", "readSessionValue", "slotHistory"} {
		if !seen[id] {
			t.Errorf("operation %s missing", id)
		}
	}
	for _, part := range strings.Split(string(server.OpenAPI()), `"$ref": "#/components/schemas/`)[1:] {
		name := part[:strings.IndexByte(part, '"')]
		if _, ok := d.Comp.Schemas[name]; !ok {
			t.Errorf("unresolved schema reference %s", name)
		}
	}
}

// flatten returns sc and the schemas it holds by $ref and allOf.
func flatten(doc map[string]any, sc any) []map[string]any {
	m, ok := sc.(map[string]any)
	if !ok {
		return nil
	}
	out := []map[string]any{m}
	if r, ok := m["$ref"].(string); ok {
		out = append(out, flatten(doc, doc["components"].(map[string]any)["schemas"].(map[string]any)[strings.TrimPrefix(r, "#/components/schemas/")])...)
	}
	if all, ok := m["allOf"].([]any); ok {
		for _, s := range all {
			out = append(out, flatten(doc, s)...)
		}
	}
	return out
}

// schemasAt returns the schemas that apply to the value at path (member
// names, "[]" for an array's items) in a value of schema sc.
func schemasAt(doc map[string]any, sc any, path []string) []map[string]any {
	flat := flatten(doc, sc)
	if len(path) == 0 {
		return flat
	}
	var out []map[string]any
	for _, m := range flat {
		if path[0] == "[]" {
			if it, ok := m["items"]; ok {
				out = append(out, schemasAt(doc, it, path[1:])...)
			}
			continue
		}
		props, _ := m["properties"].(map[string]any)
		if p, ok := props[path[0]]; ok {
			out = append(out, schemasAt(doc, p, path[1:])...)
		}
	}
	return out
}

func stringList(l any) []string {
	var out []string
	for _, e := range l.([]any) {
		out = append(out, e.(string))
	}
	return out
}

// mustGive reports whether the document says a request must give member
// key of the object obj (the object without it) that lies at path: a
// required member, or a member of the alternatives of which obj no
// longer gives one complete.
func mustGive(doc map[string]any, sc any, path []string, key string, obj map[string]any) bool {
	for _, m := range schemasAt(doc, sc, path) {
		if req, ok := m["required"]; ok && slices.Contains(stringList(req), key) {
			return true
		}
		alts, _ := m["oneOf"].([]any)
		in, complete := false, false
		for _, a := range alts {
			fields := stringList(a.(map[string]any)["required"])
			in = in || slices.Contains(fields, key)
			complete = complete || !slices.ContainsFunc(fields, func(f string) bool { _, ok := obj[f]; return !ok })
		}
		if in && !complete {
			return true
		}
	}
	return false
}

// removal is a request body with one member left out.
type removal struct {
	name     string
	body     map[string]any
	required bool
}

// removals returns the example body with each member left out in turn
// (into objects, and into the first item of arrays), and whether the
// document says a request must give it.
func removals(doc map[string]any, sc any, body map[string]any) []removal {
	var out []removal
	var walk func(obj map[string]any, path []string, name string)
	walk = func(obj map[string]any, path []string, name string) {
		for k, v := range obj {
			delete(obj, k)
			out = append(out, removal{name: name + k, body: deepCopy(body), required: mustGive(doc, sc, path, k, obj)})
			obj[k] = v
			switch x := v.(type) {
			case map[string]any:
				walk(x, append(slices.Clone(path), k), name+k+".")
			case []any:
				if o, ok := x[0].(map[string]any); ok {
					walk(o, append(slices.Clone(path), k, "[]"), name+k+"[0].")
				}
			}
		}
	}
	walk(body, nil, "")
	return out
}

func deepCopy(v map[string]any) map[string]any {
	b, _ := json.Marshal(v)
	var out map[string]any
	json.Unmarshal(b, &out)
	return out
}

// TestOpenAPIRequiredMatchesServer: the document's example of every
// operation is accepted, and each of its members (of the body, nested
// ones included, or of the query) left out is refused as invalid exactly
// when the document says a request must give it: the required lists and
// alternatives are what the server requires, and a member with a server
// default is not required.
func TestOpenAPIRequiredMatchesServer(t *testing.T) {
	d, raw := loadDoc(t)
	e := newEnv(t, nil)
	check := func(id, what string, st int, b []byte, mustFail bool) {
		t.Helper()
		var p serveapi.Problem
		json.Unmarshal(b, &p)
		invalid := st == http.StatusBadRequest && p.Type == serveapi.TypeInvalid
		if invalid != mustFail {
			t.Errorf("%s %s: %d %s; the document says it is %s", id, what, st, b, map[bool]string{true: "required", false: "optional"}[mustFail])
		}
	}
	n := 0
	for path, ops := range d.Paths {
		for method, op := range ops {
			if !strings.HasPrefix(path, "/v1/") || path == "/v1/openapi.json" {
				continue
			}
			if op.RequestBody == nil {
				q := url.Values{}
				for _, p := range op.Parameters {
					if p.Example != nil {
						q.Set(p.Name, fmt.Sprint(p.Example))
					}
				}
				st, b, _ := e.do(t, adminTok, "GET", path+"?"+q.Encode(), nil)
				check(op.OperationID, "example", st, b, false)
				for _, p := range op.Parameters {
					if p.Example == nil {
						continue
					}
					q2 := url.Values{}
					for k, v := range q {
						if k != p.Name {
							q2[k] = v
						}
					}
					st, b, _ := e.do(t, adminTok, "GET", path+"?"+q2.Encode(), nil)
					check(op.OperationID, "without "+p.Name, st, b, p.Required)
					n++
				}
				continue
			}
			c := op.RequestBody.Content["application/json"]
			body, ok := c.Example.(map[string]any)
			if !ok {
				t.Fatalf("%s: no example", op.OperationID)
			}
			st, b, _ := e.do(t, adminTok, strings.ToUpper(method), path, body)
			check(op.OperationID, "example", st, b, false)
			for _, r := range removals(raw, c.Schema, deepCopy(body)) {
				st, b, _ := e.do(t, adminTok, strings.ToUpper(method), path, r.body)
				check(op.OperationID, "without "+r.name, st, b, r.required)
				n++
			}
		}
	}
	if n < 80 {
		t.Errorf("only %d members left out", n)
	}
}

// seedSlot records a failed slot of job that will be retried.
func seedSlot(t *testing.T, e *env, job string) time.Time {
	t.Helper()
	ctx := t.Context()
	slot := time.Now().Add(-time.Hour).Truncate(time.Minute)
	id := slot.UTC().Format(time.RFC3339)
	g, err := e.mem.Leases().Acquire(ctx, scheddriver.ClaimKey(job, id), "claim-token", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.mem.Schedules().Begin(ctx, scheddriver.BeginRequest{Job: job, SlotID: id, SlotTime: slot, Node: "node-a", Fence: g.Fence}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.mem.Schedules().Finish(ctx, scheddriver.FinishRequest{Job: job, SlotID: id, Fence: g.Fence, State: scheddriver.Failed,
		Error: "disk full", RetryAfter: time.Hour}); err != nil {
		t.Fatal(err)
	}
	return slot
}

// TestOpenAPIEveryOperationExercised calls every documented operation and
// checks it answers with its documented success status and a body its
// documented schema describes.
func TestOpenAPIEveryOperationExercised(t *testing.T) {
	d, raw := loadDoc(t)
	e := newEnv(t, nil)
	called := map[string]bool{}
	statusOf := map[string]string{}
	schemaOf := map[string]any{}
	for _, ops := range d.Paths {
		for _, op := range ops {
			for st, r := range op.Responses {
				if st[0] == '2' {
					statusOf[op.OperationID] = st
					schemaOf[op.OperationID] = r.Content["application/json"].Schema
				}
			}
		}
	}
	call := func(id, method, path string, body any, out any) {
		t.Helper()
		st, b, _ := e.do(t, adminTok, method, path, body)
		if want := statusOf[id]; itoa(st) != want {
			t.Fatalf("%s: status %d, want %s: %s", id, st, want, b)
		}
		called[id] = true
		if sc := schemaOf[id]; sc != nil {
			var v any
			if err := json.Unmarshal(b, &v); err != nil {
				t.Fatalf("%s: %v", id, err)
			}
			if err := server.ValidateJSON(raw, sc, v, id); err != nil {
				t.Errorf("answer not as documented: %v\n%s", err, b)
			}
		}
		if out != nil {
			if err := json.Unmarshal(b, out); err != nil {
				t.Fatalf("%s: %v", id, err)
			}
		}
	}
	ttl := serveapi.Duration(time.Minute)
	var g serveapi.LeaseGrant
	call("acquireLease", "POST", "/v1/leases/acquire", serveapi.AcquireLease{Key: "k", TTL: ttl, Holder: "node-a"}, &g)
	call("renewLease", "POST", "/v1/leases/renew", serveapi.LeaseToken{Key: "k", Token: g.Token, TTL: ttl}, nil)
	var info serveapi.LeaseInfo
	call("inspectLease", "GET", "/v1/leases/inspect?key=k", nil, &info)
	if !info.Held || info.Fence != g.Fence || info.Holder != "node-a" {
		t.Fatalf("inspect %+v after grant %+v", info, g)
	}
	var ll serveapi.LeaseList
	call("listLeases", "GET", "/v1/leases", nil, &ll)
	if len(ll.Leases) != 1 || ll.Leases[0].Key != "k" {
		t.Fatalf("list %+v", ll)
	}
	call("fencedWrite", "POST", "/v1/fenced/write", serveapi.FencedWrite{Name: "r", Fence: g.Fence, Value: "v"}, nil)
	var fv serveapi.FencedValue
	call("fencedRead", "GET", "/v1/fenced/read?name=r", nil, &fv)
	if fv.Value != "v" || fv.Fence != g.Fence {
		t.Fatalf("fenced value %+v", fv)
	}
	call("fencedHolderWrite", "POST", "/v1/fenced/holder-write", serveapi.FencedHolderWrite{Name: "r", Key: "k", Token: g.Token, Fence: g.Fence, Value: "w"}, nil)
	call("fencedRead", "GET", "/v1/fenced/read?name=r", nil, &fv)
	if fv.Value != "w" || fv.Fence != g.Fence {
		t.Fatalf("fenced value after the holder's write %+v", fv)
	}
	call("leaveLeaseQueue", "POST", "/v1/leases/leave", serveapi.LeaseToken{Key: "k", Token: "waiter-token"}, nil)
	call("releaseLease", "POST", "/v1/leases/release", serveapi.LeaseToken{Key: "k", Token: g.Token}, nil)

	var b serveapi.IdemBegun
	begin := serveapi.IdemBegin{Scope: "s", Key: "k1", Fingerprint: "f", Token: "claim-1", ClaimTTL: ttl, Retention: serveapi.Duration(time.Hour)}
	call("beginIdempotency", "POST", "/v1/idempotency/begin", begin, &b)
	call("renewIdempotency", "POST", "/v1/idempotency/renew", serveapi.IdemClaim{Scope: "s", Key: "k1", Token: "claim-1", Fence: b.Fence, TTL: ttl}, nil)
	call("completeIdempotency", "POST", "/v1/idempotency/complete", serveapi.IdemClaim{Scope: "s", Key: "k1", Token: "claim-1", Fence: b.Fence,
		Outcome: &serveapi.IdemOutcome{Value: []byte("ok")}, Retention: serveapi.Duration(time.Hour)}, nil)
	var rec serveapi.IdemRecord
	call("inspectIdempotency", "GET", "/v1/idempotency/inspect?scope=s&key=k1", nil, &rec)
	if !rec.Completed || string(rec.Outcome.Value) != "ok" {
		t.Fatalf("record %+v", rec)
	}
	call("beginIdempotency", "POST", "/v1/idempotency/begin", begin, &b)
	if b.State != "completed" || string(b.Outcome.Value) != "ok" {
		t.Fatalf("begin after complete: %+v", b)
	}
	begin.Key, begin.Token = "k2", "claim-2"
	call("beginIdempotency", "POST", "/v1/idempotency/begin", begin, nil)
	call("releaseIdempotency", "POST", "/v1/idempotency/release", serveapi.IdemClaim{Scope: "s", Key: "k2", Token: "claim-2"}, nil)

	rq := serveapi.RateRequest{Key: "u", Limit: &serveapi.Limit{Rate: 1, Period: serveapi.Duration(time.Hour)}}
	var ds serveapi.RateDecisions
	call("allowRate", "POST", "/v1/rate/allow", serveapi.RateAllow{Requests: []serveapi.RateRequest{rq}}, &ds)
	if !ds.Allowed {
		t.Fatalf("first request denied: %+v", ds)
	}
	call("allowRate", "POST", "/v1/rate/allow", serveapi.RateAllow{Requests: []serveapi.RateRequest{rq}}, &ds)
	if ds.Allowed || ds.Decisions[0].RetryAfter <= 0 {
		t.Fatalf("second request: %+v", ds)
	}
	call("resetRate", "POST", "/v1/rate/reset", serveapi.RateReset{Requests: []serveapi.RateRequest{{State: &ds.Decisions[0].State}}}, nil)
	call("allowRate", "POST", "/v1/rate/allow", serveapi.RateAllow{Requests: []serveapi.RateRequest{rq}}, &ds)
	if !ds.Allowed {
		t.Fatalf("after reset: %+v", ds)
	}
	var pg serveapi.PermitGrant
	call("acquirePermit", "POST", "/v1/permits/acquire", serveapi.Permit{Key: "u", Name: "jobs", Permits: 2, TTL: ttl}, &pg)
	if !pg.Acquired || pg.InUse != 1 {
		t.Fatalf("permit %+v", pg)
	}
	call("renewPermit", "POST", "/v1/permits/renew", serveapi.Permit{Key: "u", Name: "jobs", ID: pg.ID, TTL: ttl}, nil)
	call("releasePermit", "POST", "/v1/permits/release", serveapi.Permit{Key: "u", Name: "jobs", ID: pg.ID}, nil)

	var sr serveapi.SessionRecord
	call("createSession", "POST", "/v1/sessions", serveapi.SessionCreate{UserID: "alice", Values: map[string]string{"a": "1"},
		Idle: serveapi.Duration(time.Hour), Absolute: serveapi.Duration(2 * time.Hour)}, &sr)
	if sr.Token == "" {
		t.Fatal("no token for a session the server made")
	}
	call("loadSession", "POST", "/v1/sessions/load", serveapi.SessionRef{Token: sr.Token, Idle: serveapi.Duration(time.Hour)}, nil)
	call("writeSessionValue", "POST", "/v1/sessions/write", serveapi.SessionValueWrite{Token: sr.Token, Version: 1, Name: "role", Value: "owner"}, nil)
	var sv serveapi.SessionValue
	call("readSessionValue", "GET", "/v1/sessions/value?user_id=alice&name=role", nil, &sv)
	if !sv.Present || sv.Value != "owner" || sv.UserID != "alice" {
		t.Fatalf("session value %+v", sv)
	}
	call("touchSession", "POST", "/v1/sessions/touch", serveapi.SessionRef{ID: sr.ID, Version: 1, Idle: serveapi.Duration(time.Hour)}, nil)
	call("saveSession", "POST", "/v1/sessions/save", serveapi.SessionRef{ID: sr.ID, Version: 1, Data: []byte("{}"), Idle: serveapi.Duration(time.Hour)}, &sr)
	call("rotateSession", "POST", "/v1/sessions/rotate", serveapi.SessionRef{ID: sr.ID, NewID: sr.ID[:len(sr.ID)-4] + "abcd", Version: 2, Idle: serveapi.Duration(time.Hour)}, &sr)
	var sl serveapi.SessionList
	call("listSessions", "GET", "/v1/sessions?user_id=alice", nil, &sl)
	if len(sl.Sessions) != 1 || sl.Sessions[0].ID != sr.ID {
		t.Fatalf("sessions %+v", sl)
	}
	call("revokeSession", "POST", "/v1/sessions/revoke", serveapi.SessionRef{ID: sr.ID}, nil)
	call("revokeUserSessions", "POST", "/v1/sessions/revoke-user", serveapi.UserRef{UserID: "alice"}, nil)
	var br serveapi.BatchResults
	call("batch", "POST", "/v1/batch", serveapi.Batch{Calls: []serveapi.BatchCall{
		{Operation: "acquireLease", Body: []byte(`{"key":"batch/a","ttl":"10s"}`)},
		{Operation: "allowRate", Body: []byte(`{"requests":[{"key":"batch","limit":{"name":"api","rate":10,"period":"1m"}}]}`)},
		{Operation: "releaseLease", Body: []byte(`{"key":"batch/b","token":"R7FJKTDJ6NNMY7V2J5BMYEMBIO"}`)},
	}}, &br)
	var bg serveapi.LeaseGrant
	if len(br.Results) != 3 || br.Results[0].Status != 200 || serveapi.Unmarshal(br.Results[0].Body, &bg) != nil || bg.Fence == 0 || bg.Token == "" ||
		br.Results[1].Status != 200 || br.Results[2].Status != 409 || br.Results[2].Problem == nil || br.Results[2].Problem.Type != serveapi.TypeNotHeld {
		t.Fatalf("batch results %+v", br)
	}
	slot := seedSlot(t, e, "nightly")
	var slots struct {
		Slots []struct {
			SlotTime time.Time `json:"slot_time"`
			State    string    `json:"state"`
			RetryAt  time.Time `json:"retry_at"`
			History  []struct {
				Node    string `json:"node"`
				Outcome string `json:"outcome"`
			} `json:"history"`
		} `json:"slots"`
	}
	call("slotHistory", "GET", "/v1/schedule/slots?job=nightly", nil, &slots)
	if len(slots.Slots) != 1 || !slots.Slots[0].SlotTime.Equal(slot) || slots.Slots[0].State != "failed" || slots.Slots[0].RetryAt.IsZero() ||
		len(slots.Slots[0].History) != 1 || slots.Slots[0].History[0].Outcome != "failed" || slots.Slots[0].History[0].Node != "node-a" {
		t.Fatalf("slots %+v", slots)
	}
	call("health", "GET", "/healthz", nil, nil)
	call("ready", "GET", "/readyz", nil, nil)
	call("metrics", "GET", "/metrics", nil, nil)
	call("openapi", "GET", "/v1/openapi.json", nil, nil)

	for _, ops := range d.Paths {
		for _, op := range ops {
			if !called[op.OperationID] {
				t.Errorf("documented operation %s not exercised", op.OperationID)
			}
		}
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// requiredDefaults returns where, in values of schema sc of doc, a member
// that has a default (a "default" in one of its schemas) is required: by
// a required list of any schema that applies to the object ($ref, allOf,
// oneOf alternatives). A client generated from the document must be free
// to leave such a member out, for the server fills it in.
func requiredDefaults(doc map[string]any, sc any, at string, seen map[string]bool) []string {
	var all []map[string]any
	for _, m := range flatten(doc, sc) {
		all = append(all, m)
		if alts, ok := m["oneOf"].([]any); ok {
			for _, a := range alts {
				all = append(all, flatten(doc, a)...)
			}
		}
	}
	props := map[string][]map[string]any{}
	var required []string
	var items []any
	for _, m := range all {
		if r, ok := m["required"]; ok {
			required = append(required, stringList(r)...)
		}
		ps, _ := m["properties"].(map[string]any)
		for name, p := range ps {
			props[name] = append(props[name], flatten(doc, p)...)
		}
		if it, ok := m["items"]; ok {
			items = append(items, it)
		}
		if ap, ok := m["additionalProperties"].(map[string]any); ok {
			items = append(items, ap)
		}
	}
	var out []string
	for _, name := range required {
		if slices.ContainsFunc(props[name], func(p map[string]any) bool { _, ok := p["default"]; return ok }) {
			out = append(out, at+"."+name)
		}
	}
	for _, name := range sortedNames(props) {
		for _, p := range props[name] {
			if r, ok := p["$ref"].(string); ok {
				if seen[r] {
					continue
				}
				seen[r] = true
			}
			out = append(out, requiredDefaults(doc, p, at+"."+name, seen)...)
		}
	}
	for _, it := range items {
		out = append(out, requiredDefaults(doc, it, at+"[]", seen)...)
	}
	return out
}

func sortedNames[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// TestOpenAPIDefaultsNotRequired: no member with a server default (the
// rate limit's algorithm, a cost, a claim time, a list's limit) is
// required by any schema of the document, request bodies and query
// parameters included, so that generated clients make it optional.
func TestOpenAPIDefaultsNotRequired(t *testing.T) {
	_, raw := loadDoc(t)
	var bad []string
	schemas := raw["components"].(map[string]any)["schemas"].(map[string]any)
	for _, name := range sortedNames(schemas) {
		bad = append(bad, requiredDefaults(raw, schemas[name], name, map[string]bool{})...)
	}
	defaults := 0
	for path, ops := range raw["paths"].(map[string]any) {
		for method, o := range ops.(map[string]any) {
			op := o.(map[string]any)
			at := method + " " + path
			if rb, ok := op["requestBody"].(map[string]any); ok {
				for _, c := range rb["content"].(map[string]any) {
					bad = append(bad, requiredDefaults(raw, c.(map[string]any)["schema"], at, map[string]bool{})...)
				}
			}
			params, _ := op["parameters"].([]any)
			for _, p := range params {
				p := p.(map[string]any)
				if _, ok := p["schema"].(map[string]any)["default"]; ok {
					defaults++
					if p["required"] == true {
						bad = append(bad, at+" ?"+p["name"].(string))
					}
				}
			}
		}
	}
	for _, b := range bad {
		t.Errorf("%s has a default and is required", b)
	}
	// The document has defaults to check, and the check finds one that is
	// required.
	if !strings.Contains(string(server.OpenAPI()), `"default": "gcra"`) || defaults == 0 {
		t.Error("no defaults in the document: the check checks nothing")
	}
	doc := map[string]any{"components": map[string]any{"schemas": map[string]any{
		"Req": map[string]any{"type": "object", "properties": map[string]any{"algorithm": map[string]any{"type": "string", "default": "gcra"}}},
	}}}
	for _, sc := range []any{
		map[string]any{"allOf": []any{map[string]any{"$ref": "#/components/schemas/Req"}, map[string]any{"required": []any{"algorithm"}}}},
		map[string]any{"type": "array", "items": map[string]any{"allOf": []any{map[string]any{"$ref": "#/components/schemas/Req"},
			map[string]any{"oneOf": []any{map[string]any{"required": []any{"algorithm"}}}}}}},
	} {
		if got := requiredDefaults(doc, sc, "x", map[string]bool{}); len(got) != 1 {
			t.Errorf("requiredDefaults of a required default = %v, want it found", got)
		}
	}
}
