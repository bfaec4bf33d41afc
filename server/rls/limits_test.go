package rls_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tenurekit/tenure"
	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/ratelimit/driver"
	"github.com/tenurekit/tenure/server/rls"
)

// countingStore counts the decisions that reach the store.
type countingStore struct {
	ratelimit.Store
	n int
}

func (c *countingStore) Decide(ctx context.Context, r []driver.Request, commit bool) ([]ratelimit.Decision, error) {
	c.n++
	return c.Store.Decide(ctx, r, commit)
}

// TestCallLimits: a call with more descriptors, or a descriptor with more
// entries, than the server allows is refused before the store is asked;
// a request message over MaxMessageBytes is refused by gRPC.
func TestCallLimits(t *testing.T) {
	st := &countingStore{Store: newMem(t, nil).Limits()}
	srv, err := rls.NewServer(st, mustConfig(t, testConfig), &rls.Options{MaxDescriptors: 4, MaxEntries: 3, MaxMessageBytes: 2048})
	if err != nil {
		t.Fatal(err)
	}
	c := rlsv3.NewRateLimitServiceClient(serveTCP(t, srv))
	many := make([]*rlcommon.RateLimitDescriptor, 5)
	for i := range many {
		many[i] = desc("tenant", "a")
	}
	wide := desc("tenant", "a", "path", "/x", "k", "v", "k2", "v2")
	for _, req := range []*rlsv3.RateLimitRequest{
		{Domain: "edge", Descriptors: many},
		{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{wide}},
	} {
		if _, err := c.ShouldRateLimit(t.Context(), req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%d descriptors: %v, want InvalidArgument", len(req.Descriptors), err)
		}
	}
	big := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{desc("tenant", strings.Repeat("x", 4096))}}
	if _, err := c.ShouldRateLimit(t.Context(), big); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a 4 KiB message with a 2 KiB limit: %v, want ResourceExhausted", err)
	}
	if st.n != 0 {
		t.Fatalf("%d decisions reached the store for refused calls", st.n)
	}
	call(t, c, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: many[:4]})
	if st.n == 0 {
		t.Fatal("an allowed call did not reach the store")
	}
}

// TestCredentials: with Options.Credentials a call needs a known bearer
// token allowed its domain; errors never show a token.
func TestCredentials(t *testing.T) {
	const all, edgeOnly = "token-for-every-domain-0123", "token-for-edge-only-45678"
	c := bufClient(t, newMem(t, nil).Limits(), &rls.Options{Credentials: []rls.Credential{
		{Token: tenure.TokenOf(all)},
		{Token: tenure.TokenOf(edgeOnly), Domains: []string{"edge"}},
	}})
	req := func(domain string) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlcommon.RateLimitDescriptor{desc("tenant", "a")}}
	}
	with := func(tok string) context.Context {
		if tok == "" {
			return t.Context()
		}
		return metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+tok)
	}
	for _, cse := range []struct {
		tok, domain string
		code        codes.Code
	}{
		{"", "edge", codes.Unauthenticated},
		{"wrong-token-0123456789", "edge", codes.Unauthenticated},
		{edgeOnly, "other", codes.PermissionDenied},
		{edgeOnly, "edge", codes.OK},
		{all, "other", codes.OK},
	} {
		_, err := c.ShouldRateLimit(with(cse.tok), req(cse.domain))
		if status.Code(err) != cse.code {
			t.Errorf("token %q, domain %s: %v, want %v", cse.tok[:min(len(cse.tok), 5)], cse.domain, err, cse.code)
		}
		if err != nil && (strings.Contains(err.Error(), all) || strings.Contains(err.Error(), edgeOnly) || strings.Contains(err.Error(), "wrong-token")) {
			t.Errorf("the error shows a token: %v", err)
		}
	}
}

func TestOptionsInvalid(t *testing.T) {
	st := newMem(t, nil).Limits()
	for _, o := range []*rls.Options{
		{MaxDescriptors: -1}, {MaxDescriptors: 10001}, {MaxEntries: -1}, {MaxMessageBytes: 5 << 20},
		{Credentials: []rls.Credential{{Token: tenure.TokenOf("short")}}},
		{Credentials: []rls.Credential{{Token: tenure.TokenOf("has a space in it 0123")}}},
		{Credentials: []rls.Credential{{Token: tenure.TokenOf("same-token-0123456789")}, {Token: tenure.TokenOf("same-token-0123456789")}}},
	} {
		if _, err := rls.NewServer(st, mustConfig(t, testConfig), o); !errors.Is(err, ratelimit.ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", o, err)
		} else if strings.Contains(err.Error(), "0123") {
			t.Errorf("the error shows a token: %v", err)
		}
	}
}
