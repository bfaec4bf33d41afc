package server

import (
	"context"
	"time"
	"unicode/utf8"

	"github.com/tenurekit/tenure"
	"github.com/tenurekit/tenure/internal/serveapi"
	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
)

// fencedOps are the operations on the values the server keeps behind a
// fence (FencedKV), for resources that have no guard of their own.
var fencedOps = []operation{
	&op[serveapi.FencedHolderWrite, noBody]{Method: "POST", Path: "/v1/fenced/holder-write", ID: "fencedHolderWrite",
		Needs: fencedView, Scope: "name", Problems: []string{"not_held", "stale"}, Handle: fencedHolderWrite,
		Doc: "Set a server-kept value only while the lease (key, token, fence) still holds its key, checked on the store's clock in the same atomic step as the write; " +
			"a lease that ended is refused even before the next holder wrote. The write for read-modify-write.",
		Example: serveapi.FencedHolderWrite{Name: "billing/ledger", Key: "billing/close-month", Token: "R7FJKTDJ6NNMY7V2J5BMYEMBIO", Fence: 1796137794183175, Value: "closed: 2026-11"}},
	&op[serveapi.FencedWrite, noBody]{Method: "POST", Path: "/v1/fenced/write", ID: "fencedWrite",
		Needs: fencedView, Scope: "name", Problems: []string{"stale"}, Handle: fencedWrite,
		Doc: "Set a server-kept value if fence is greater than every fence admitted for name before: ordering only, blind to time " +
			"(a holder whose lease ended is still admitted until the next holder wrote; read-modify-write wants fencedHolderWrite).",
		Example: serveapi.FencedWrite{Name: "billing/ledger", Fence: 1796137794183175, Value: "closed: 2026-11"}},
	&op[fencedReadQuery, serveapi.FencedValue]{Method: "GET", Path: "/v1/fenced/read", ID: "fencedRead",
		Needs: fencedView, Scope: "name", Handle: fencedRead,
		Doc:     "A server-kept value and the fence that wrote it (fence 0: never written).",
		Example: fencedReadQuery{Name: "billing/ledger"}},
}

// fencedReadQuery is the query of fencedRead.
type fencedReadQuery struct {
	Name string `query:"name" doc:"the value's name"`
}

func fencedWrite(ctx context.Context, r *request, in serveapi.FencedWrite) (noBody, error) {
	if in.Value != "" && in.ValueBase64 != nil {
		return noBody{}, invalidf("give value or value_base64, not both")
	}
	if err := leasedriver.ValidateKey(in.Name); err != nil {
		return noBody{}, err
	}
	if in.Fence == 0 {
		return noBody{}, invalidf("fence must be a lease's fence (at least 1)")
	}
	v := in.ValueBase64
	if v == nil {
		v = []byte(in.Value)
	}
	return noBody{}, r.s.st.Fenced.FencedWrite(ctx, in.Name, in.Fence, v)
}

func fencedHolderWrite(ctx context.Context, r *request, in serveapi.FencedHolderWrite) (noBody, error) {
	if in.Value != "" && in.ValueBase64 != nil {
		return noBody{}, invalidf("give value or value_base64, not both")
	}
	if err := leasedriver.ValidateKey(in.Name); err != nil {
		return noBody{}, err
	}
	if err := leasedriver.Validate(in.Key, in.Token, time.Second); err != nil {
		return noBody{}, err
	}
	if in.Fence == 0 {
		return noBody{}, invalidf("fence must be the lease's fence (at least 1)")
	}
	if err := r.guard("key", in.Key); err != nil {
		return noBody{}, err
	}
	v := in.ValueBase64
	if v == nil {
		v = []byte(in.Value)
	}
	return noBody{}, r.s.st.Fenced.HolderWrite(ctx, lease.Remote(in.Key, tenure.TokenOf(in.Token), in.Fence), in.Name, v)
}

func fencedRead(ctx context.Context, r *request, in fencedReadQuery) (serveapi.FencedValue, error) {
	if err := leasedriver.ValidateKey(in.Name); err != nil {
		return serveapi.FencedValue{}, err
	}
	v, f, err := r.s.st.Fenced.FencedRead(ctx, in.Name)
	if err != nil {
		return serveapi.FencedValue{}, err
	}
	out := serveapi.FencedValue{Name: in.Name, Fence: f, ValueBase64: v}
	if out.ValueBase64 == nil {
		out.ValueBase64 = []byte{}
	}
	if utf8.Valid(v) {
		out.Value = string(v)
	}
	return out, nil
}
