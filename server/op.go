package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"time"

	"github.com/tenurekit/tenure/internal/serveapi"
	"github.com/tenurekit/tenure/lease"
)

// operations are the API's operations, each declared once in the file of
// its primitive (op_*.go). The mux, the tokens' operation lists, the
// dashboard's in-process calls and the OpenAPI document are all made from
// them.
var operations = slices.Concat(leaseOps, fencedOps, idempotencyOps, rateOps, permitOps, sessionOps, scheduleOps, batchOps)

// Route is one API operation: its method, path and operation ID (the
// OpenAPI document's operationId, and the name a token's operation list
// uses).
type Route struct {
	Method, Path, OperationID string
}

// Routes returns the API's operations (the authenticated /v1 routes).
func Routes() []Route {
	rs := make([]Route, len(operations))
	for i, o := range operations {
		rs[i] = o.spec().Route
	}
	return rs
}

// OperationIDs returns the operation IDs of Routes.
func OperationIDs() []string {
	ids := make([]string, len(operations))
	for i, o := range operations {
		ids[i] = o.spec().OperationID
	}
	return ids
}

// readOps are the operation IDs of the GET operations, which read and
// change nothing.
func readOps() []string {
	var ids []string
	for _, o := range operations {
		if d := o.spec(); d.Method == http.MethodGet {
			ids = append(ids, d.OperationID)
		}
	}
	return ids
}

// routes mounts the operations on the server's mux.
func (s *Server) routes() {
	s.handlers = map[string]handler{}
	s.batchCalls = batchable(s)
	for _, o := range operations {
		d := o.spec()
		h := o.serve(s)
		s.handlers[d.OperationID] = h
		s.mux.Handle(d.Method+" "+d.Path, s.api(d.OperationID, h))
	}
	// Unknown /v1 routes answer with a problem, not the placeholder page.
	s.mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, serveapi.NewProblem(serveapi.TypeNotFound, "no such route: "+r.Method+" "+r.URL.Path))
	})
}

// op declares one API operation. In is the request: the JSON body of a
// POST, or for a GET a struct whose fields are tagged query:"name". Out is
// the response body, or noBody for 204 No Content.
//
// Every operation is served the same way: In is decoded (strictly), the
// store view it needs is checked (not_supported), the token's namespaces
// are checked for the Scope member's value (forbidden), Handle runs, and
// Out or the problem of Handle's error is written. The OpenAPI document
// describes In and Out from their struct tags: json names the field, doc
// describes it, and a field without omitempty (or omitzero) is one the
// server requires in a request and always writes in a response.
type op[In, Out any] struct {
	// Method, Path and ID are the route and the operation ID (the OpenAPI
	// operationId, and the name a token's operation list uses).
	Method, Path, ID string
	// Doc is the operation's summary in the OpenAPI document.
	Doc string
	// Status is the success status: default 200, or 204 when Out is
	// noBody.
	Status int
	// Needs is the store view the operation calls; without it the
	// operation answers not_supported.
	Needs storeView
	// Scope is the member of In (its JSON or query name) whose value the
	// token's namespaces must cover; "" when Handle checks a key it
	// derives itself (request.guard).
	Scope string
	// Required lists the fields this operation requires beyond those In's
	// type requires: JSON names, "a.b" for a field of an object and
	// "a[].b" for a field of each item of an array.
	Required []string
	// OneOf lists groups of alternatives of which a request gives exactly
	// one; an alternative is a field or several joined with "+"
	// ("key+name"), all under the same object.
	OneOf [][]string
	// Problems are the problem types the operation may answer with
	// besides those every operation may (unauthorized, forbidden,
	// rate_limited, invalid, unavailable, not_supported; too_large with a
	// body).
	Problems []string
	// Example is a request the server accepts, shown in the document (the
	// tests send it, and it with each field left out in turn).
	Example In
	// Handle serves a decoded and authorized request.
	Handle func(ctx context.Context, r *request, in In) (Out, error)
}

// noBody is the Out of an operation that answers 204 No Content.
type noBody struct{}

// operation is an op of any types, as the server and the document use it.
type operation interface {
	spec() opSpec
	serve(s *Server) handler
	call(s *Server) batchCall
}

// opSpec is an operation's declaration without its types' parameters.
type opSpec struct {
	Route
	doc      string
	status   int
	needs    storeView
	scope    string
	in, out  reflect.Type
	required []string
	oneOf    [][]string
	problems []string
	example  any
}

func (o *op[In, Out]) spec() opSpec {
	out := reflect.TypeFor[Out]()
	st := o.Status
	if st == 0 {
		st = http.StatusOK
		if out == reflect.TypeFor[noBody]() {
			st = http.StatusNoContent
		}
	}
	return opSpec{Route: Route{o.Method, o.Path, o.ID}, doc: o.Doc, status: st, needs: o.Needs, scope: o.Scope,
		in: reflect.TypeFor[In](), out: out, required: o.Required, oneOf: o.OneOf, problems: o.Problems, example: o.Example}
}

// serve returns the operation's handler on s.
func (o *op[In, Out]) serve(s *Server) handler {
	status := o.spec().status
	get := o.Method == http.MethodGet
	var query []queryField
	if get {
		query = queryFields(reflect.TypeFor[In]())
	}
	scope := scopeField(o.spec())
	return func(w http.ResponseWriter, hr *http.Request, p principal) {
		var in In
		var err error
		if get {
			err = decodeQuery(hr.URL.Query(), query, &in)
		} else {
			err = decodeBody(hr, &in)
		}
		if err != nil {
			fail(w, err)
			return
		}
		out, err := o.run(hr.Context(), &request{s: s, p: p, header: w.Header()}, scope, &in)
		switch {
		case err != nil:
			fail(w, err)
		case status == http.StatusNoContent:
			w.WriteHeader(status)
		default:
			writeJSON(w, status, out)
		}
	}
}

// run serves a decoded request: it checks the store view and the token's
// namespaces, runs Handle and records the operation's telemetry.
func (o *op[In, Out]) run(ctx context.Context, r *request, scope int, in *In) (Out, error) {
	s := r.s
	if !o.Needs.has(&s.st) {
		var zero Out
		return zero, notSupported(o.Needs.what)
	}
	if scope >= 0 {
		if err := r.guard(o.Scope, reflect.ValueOf(in).Elem().Field(scope).String()); err != nil {
			var zero Out
			return zero, err
		}
	}
	start := time.Now()
	out, err := o.Handle(ctx, r, *in)
	if s.tel != nil {
		s.tel.record(ctx, o.ID, in, out, err, start)
	}
	return out, err
}

// scopeField returns the index of d's Scope member in its input, -1 for
// none; it panics when the input has no such string member.
func scopeField(d opSpec) int {
	if d.scope == "" {
		return -1
	}
	if d.Method == http.MethodGet {
		for _, f := range queryFields(d.in) {
			if f.name == d.scope && f.typ.Kind() == reflect.String {
				return f.index
			}
		}
	}
	for _, f := range jsonFields(d.in) {
		if f.name == d.scope && f.typ.Kind() == reflect.String {
			return f.index
		}
	}
	panic("server: " + d.OperationID + ": no string member " + d.scope)
}

// storeView is a store view operations call.
type storeView struct {
	// what the store does not keep, for the not_supported problem.
	what string
	has  func(st *Stores) bool
}

// The store views of the operations.
var (
	leaseView  = storeView{"leases", func(st *Stores) bool { return st.Leases != nil }}
	fencedView = storeView{"fenced values", func(st *Stores) bool { return st.Fenced != nil }}
	idemView   = storeView{"idempotency records", func(st *Stores) bool { return st.Idempotency != nil }}
	rateView   = storeView{"rate limits", func(st *Stores) bool { return st.Limits != nil }}
	// listView is a lease store that lists its keys (lease.Lister).
	listView    = storeView{"a list of leases", func(st *Stores) bool { _, ok := st.Leases.(lease.Lister); return ok }}
	sessionView = storeView{"sessions", func(st *Stores) bool { return st.Sessions != nil }}
	// sessionValueView is the values checked against a session, and the
	// sessions they are checked against.
	sessionValueView = storeView{"values checked against a session", func(st *Stores) bool { return st.SessionValues != nil && st.Sessions != nil }}
	scheduleView     = storeView{"schedules", func(st *Stores) bool { return st.Schedules != nil }}
	// anyView is no view of its own: each call of a batch needs its own.
	anyView = storeView{"", func(*Stores) bool { return true }}
)

// request is what an operation's Handle gets besides its input: the
// server and the token the request authenticated with.
type request struct {
	s *Server
	p principal
	// header is the answer's header, for operations that set fields of
	// their own (allowRate's RateLimit fields); nil for a call of a batch.
	header http.Header
	// batch is set for a call of a batch, which must answer at once.
	batch bool
}

// guard returns a forbidden problem when key lies outside the token's
// namespaces; what names the key for the detail.
func (r *request) guard(what, key string) error {
	if r.p.allows(key) {
		return nil
	}
	return &problemError{serveapi.NewProblem(serveapi.TypeForbidden, fmt.Sprintf("token %q may not touch %s %q", r.p.t.name, what, key))}
}

// problemError is an answer the server makes itself (bad input it checks,
// a missing store view, a namespace): fail writes its problem as it is.
type problemError struct{ p serveapi.Problem }

func (e *problemError) Error() string { return e.p.Detail }

// invalidf returns an invalid problem with the detail.
func invalidf(format string, args ...any) error {
	return &problemError{serveapi.NewProblem(serveapi.TypeInvalid, fmt.Sprintf(format, args...))}
}

// notSupported returns the not_supported problem of a store that does not
// keep what.
func notSupported(what string) error {
	return &problemError{serveapi.NewProblem(serveapi.TypeNotSupported, "the store does not keep "+what)}
}

// problemOf returns the problem to answer err with.
func problemOf(err error) serveapi.Problem {
	var pe *problemError
	if errors.As(err, &pe) {
		return pe.p
	}
	return serveapi.ProblemOf(err)
}
