package rls_test

import (
	"context"
	"errors"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tenurekit/tenure/ratelimit"

	"github.com/tenurekit/tenure/ratelimit/driver"
	"github.com/tenurekit/tenure/server/rls"
	"github.com/tenurekit/tenure/store/memstore"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

// testConfig has the shapes the tests exercise: nested descriptors with a
// wildcard, an unlimited value, a shadow-mode limit and a fixed window.
const testConfig = `
domain: edge
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 3}
    descriptors:
      - key: path
        value: "/export/*"
        rate_limit: {name: export, unit: hour, requests_per_unit: 2}
  - key: tenant
    value: internal
    rate_limit: {unlimited: true}
  - key: remote_address
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: generic
    value: big
    rate_limit: {unit: day, requests_per_unit: 10, algorithm: fixed-window}
`

// epoch is the stores' fake clock: far from the test machine's clock, so
// a duration computed from the machine's clock would show.
var epoch = time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// backend opens a store with a fake clock; open returns another handle on
// the same state (another process's view, for SQLite).
type backend struct {
	name string
	open func(t *testing.T, dir string, clock func() time.Time) func() ratelimit.Store
}

var backends = []backend{
	{"memstore", func(t *testing.T, _ string, clock func() time.Time) func() ratelimit.Store {
		s := newMem(t, &memstore.Options{Clock: clock})
		return func() ratelimit.Store { return s.Limits() }
	}},
	{"sqlitestore", func(t *testing.T, dir string, clock func() time.Time) func() ratelimit.Store {
		path := filepath.Join(dir, "tenure.db")
		return func() ratelimit.Store {
			s, err := sqlitestore.Open(context.Background(), path, &sqlitestore.Options{Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s.Limits()
		}
	}},
}

func mustConfig(t *testing.T, src string) *rls.Config {
	t.Helper()
	c, err := rls.ParseYAML([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// serveTCP serves srv on a loopback TCP port and returns a client.
func serveTCP(t *testing.T, srv *rls.Server) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cc.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return cc
}

// bufClient is a client of a server over store with testConfig and o,
// served over bufconn.
func bufClient(t *testing.T, store ratelimit.Store, o *rls.Options) rlsv3.RateLimitServiceClient {
	t.Helper()
	srv, err := rls.NewServer(store, mustConfig(t, testConfig), o)
	if err != nil {
		t.Fatal(err)
	}
	return rlsv3.NewRateLimitServiceClient(serveBuf(t, srv))
}

// serveBuf serves srv, registered on a plain grpc.Server, over bufconn.
func serveBuf(t *testing.T, srv *rls.Server) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	g := grpc.NewServer()
	srv.Register(g)
	go g.Serve(lis)
	cc, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close(); g.Stop() })
	return cc
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func withHits(d *rlcommon.RateLimitDescriptor, n uint64) *rlcommon.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func call(t *testing.T, c rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := c.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	if len(resp.Statuses) != len(req.Descriptors) {
		t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(req.Descriptors))
	}
	return resp
}

// want is an expected DescriptorStatus; name "" means no current_limit.
type want struct {
	code      rlsv3.RateLimitResponse_Code
	name      string
	rpu       uint32
	unit      rlsv3.RateLimitResponse_RateLimit_Unit
	remaining uint32
	reset     time.Duration
}

func check(t *testing.T, resp *rlsv3.RateLimitResponse, overall rlsv3.RateLimitResponse_Code, ws ...want) {
	t.Helper()
	if resp.OverallCode != overall {
		t.Errorf("overall_code %v, want %v", resp.OverallCode, overall)
	}
	for i, w := range ws {
		st := resp.Statuses[i]
		if st.Code != w.code || st.LimitRemaining != w.remaining {
			t.Errorf("status[%d]: code %v remaining %d, want %v %d", i, st.Code, st.LimitRemaining, w.code, w.remaining)
		}
		if w.name == "" {
			if st.CurrentLimit != nil || st.DurationUntilReset != nil {
				t.Errorf("status[%d]: current_limit %v, duration %v; want none", i, st.CurrentLimit, st.DurationUntilReset)
			}
			continue
		}
		cl := st.CurrentLimit
		if cl == nil || cl.RequestsPerUnit != w.rpu || cl.Unit != w.unit || (w.name != "*" && cl.Name != w.name) {
			t.Errorf("status[%d]: current_limit %v, want %s %d %v", i, cl, w.name, w.rpu, w.unit)
		}
		if got := st.DurationUntilReset.AsDuration(); got != w.reset {
			t.Errorf("status[%d]: duration_until_reset %v, want %v", i, got, w.reset)
		}
	}
}

func headers(resp *rlsv3.RateLimitResponse) map[string]string {
	m := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		m[h.Key] = h.Value
	}
	return m
}

func wantHeaders(t *testing.T, resp *rlsv3.RateLimitResponse, limit, remaining, reset string) {
	t.Helper()
	h := headers(resp)
	if len(resp.ResponseHeadersToAdd) != 3 || h["x-ratelimit-limit"] != limit || h["x-ratelimit-remaining"] != remaining || h["x-ratelimit-reset"] != reset {
		t.Errorf("headers %v, want limit %s remaining %s reset %s", h, limit, remaining, reset)
	}
}

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

var none = want{code: ok, remaining: math.MaxUint32}

// TestShouldRateLimit sends requests of several descriptors (nested, with
// a wildcard, unlimited, hitting no rule) over TCP and checks codes,
// statuses, durations on the store's clock, headers, and that a denied
// request consumes nothing from its other descriptors.
func TestShouldRateLimit(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			clock := &fakeClock{t: epoch}
			open := b.open(t, t.TempDir(), clock.Now)
			srv, err := rls.NewServer(open(), mustConfig(t, testConfig), nil)
			if err != nil {
				t.Fatal(err)
			}
			c := rlsv3.NewRateLimitServiceClient(serveTCP(t, srv))
			req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{
				desc("tenant", "a"),
				desc("tenant", "a", "path", "/export/x"),
				desc("unknown", "1"),
				desc("tenant", "internal"),
				desc("tenant", "a", "path", "/other"), // deeper than any rule there
			}}
			tenant := func(rem uint32, reset time.Duration) want {
				return want{ok, "*", 3, rlsv3.RateLimitResponse_RateLimit_MINUTE, rem, reset}
			}
			export := func(code rlsv3.RateLimitResponse_Code, rem uint32, reset time.Duration) want {
				return want{code, "export", 2, rlsv3.RateLimitResponse_RateLimit_HOUR, rem, reset}
			}
			resp := call(t, c, req)
			check(t, resp, ok, tenant(2, 20*time.Second), export(ok, 1, 30*time.Minute), none, none, none)
			wantHeaders(t, resp, "2", "1", "1800")
			name := resp.Statuses[0].CurrentLimit.Name
			if !strings.HasPrefix(name, "tenant-") {
				t.Errorf("derived limit name %q", name)
			}

			clock.Add(10 * time.Second)
			resp = call(t, c, req)
			// GCRA: 10s refilled half a unit of tenant=a's bucket.
			check(t, resp, ok, tenant(1, 30*time.Second), export(ok, 0, 60*time.Minute-10*time.Second), none, none, none)
			wantHeaders(t, resp, "2", "0", "3590")

			resp = call(t, c, req)
			check(t, resp, over, tenant(1, 30*time.Second), export(over, 0, 30*time.Minute-10*time.Second), none, none, none)
			wantHeaders(t, resp, "2", "0", "1790")

			// One counter read and to be charged in a request that is
			// over (tenant=c asks more than its limit can ever admit):
			// both only read.
			resp = call(t, c, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{
				withHits(desc("tenant", "a"), 0), desc("tenant", "a"), withHits(desc("tenant", "c"), 5)}})
			check(t, resp, over, tenant(1, 30*time.Second), tenant(1, 30*time.Second),
				want{over, "*", 3, rlsv3.RateLimitResponse_RateLimit_MINUTE, 3, 0})
			wantHeaders(t, resp, "3", "3", "0")

			// The denied requests consumed nothing from tenant=a.
			resp = call(t, c, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{withHits(desc("tenant", "a"), 0)}})
			check(t, resp, ok, tenant(1, 30*time.Second))
			wantHeaders(t, resp, "3", "1", "30")
		})
	}
}

// TestHitsAddend checks the request's hits_addend, a descriptor's own
// (which overrides it), 0 (read only) and more than the limit holds.
func TestHitsAddend(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			clock := &fakeClock{t: epoch}
			srv, err := rls.NewServer(b.open(t, t.TempDir(), clock.Now)(), mustConfig(t, testConfig), nil)
			if err != nil {
				t.Fatal(err)
			}
			c := rlsv3.NewRateLimitServiceClient(serveBuf(t, srv))
			big := func(code rlsv3.RateLimitResponse_Code, rem uint32) want {
				return want{code, "*", 10, rlsv3.RateLimitResponse_RateLimit_DAY, rem, 24 * time.Hour}
			}
			r := func(hits uint32, ds ...*rlcommon.RateLimitDescriptor) *rlsv3.RateLimitRequest {
				return &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: hits, Descriptors: ds}
			}
			check(t, call(t, c, r(3, desc("generic", "big"))), ok, big(ok, 7))
			check(t, call(t, c, r(3, withHits(desc("generic", "big"), 2))), ok, big(ok, 5))
			check(t, call(t, c, r(3, withHits(desc("generic", "big"), 0))), ok, big(ok, 5))
			// Two descriptors on the same counter add up.
			check(t, call(t, c, r(0, desc("generic", "big"), desc("generic", "big"))), ok, big(ok, 3), big(ok, 3))
			// 11 can never pass a limit of 10: over, nothing consumed.
			check(t, call(t, c, r(11, desc("generic", "big"))), over, big(over, 3))
			check(t, call(t, c, r(4, desc("generic", "big"))), over, big(over, 3))
			check(t, call(t, c, r(3, desc("generic", "big"))), ok, big(ok, 0))
		})
	}
}

// TestShadowMode checks that a shadow-mode limit counts, answers OK when
// over, stays out of the headers, and does not stop the request's other
// limits from counting it.
func TestShadowMode(t *testing.T) {
	clock := &fakeClock{t: epoch}
	c := bufClient(t, newMem(t, &memstore.Options{Clock: clock.Now}).Limits(), nil)
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{desc("remote_address", "10.0.0.1"), desc("tenant", "b")}}
	shadow := func(rem uint32, reset time.Duration) want {
		return want{ok, "*", 1, rlsv3.RateLimitResponse_RateLimit_SECOND, rem, reset}
	}
	tenant := func(rem uint32, reset time.Duration) want {
		return want{ok, "*", 3, rlsv3.RateLimitResponse_RateLimit_MINUTE, rem, reset}
	}
	resp := call(t, c, req)
	check(t, resp, ok, shadow(0, time.Second), tenant(2, 20*time.Second))
	wantHeaders(t, resp, "3", "2", "20")
	resp = call(t, c, req) // the shadow limit is over: still OK, and tenant=b counts
	check(t, resp, ok, shadow(0, time.Second), tenant(1, 40*time.Second))
	wantHeaders(t, resp, "3", "1", "40")
	// Only shadow descriptors: no headers.
	resp = call(t, c, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{desc("remote_address", "10.0.0.1")}})
	check(t, resp, ok, shadow(0, time.Second))
	if len(resp.ResponseHeadersToAdd) != 0 {
		t.Errorf("headers %v for a shadow-mode descriptor", headers(resp))
	}
}

// TestTwoInstances checks that two servers over the same store (for
// SQLite, two handles on one file, as two processes would have) share
// their counters.
func TestTwoInstances(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			clock := &fakeClock{t: epoch}
			open := b.open(t, t.TempDir(), clock.Now)
			cfg := mustConfig(t, testConfig)
			var clients []rlsv3.RateLimitServiceClient
			for range 2 {
				srv, err := rls.NewServer(open(), cfg, nil)
				if err != nil {
					t.Fatal(err)
				}
				clients = append(clients, rlsv3.NewRateLimitServiceClient(serveTCP(t, srv)))
			}
			req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{desc("tenant", "shared")}}
			var got []string
			for i := range 4 {
				resp := call(t, clients[i%2], req)
				got = append(got, resp.OverallCode.String()+"/"+headers(resp)["x-ratelimit-remaining"])
			}
			if w := "OK/2 OK/1 OK/0 OVER_LIMIT/0"; strings.Join(got, " ") != w {
				t.Errorf("alternating servers: %s, want %s", strings.Join(got, " "), w)
			}
		})
	}
}

// TestBadRequests follows envoyproxy/ratelimit: an empty domain or
// descriptor list is an error, an unknown domain limits nothing.
func TestBadRequests(t *testing.T) {
	c := bufClient(t, newMem(t, nil).Limits(), nil)
	for _, req := range []*rlsv3.RateLimitRequest{
		{Descriptors: []*rlcommon.RateLimitDescriptor{desc("tenant", "a")}},
		{Domain: "edge"},
	} {
		_, err := c.ShouldRateLimit(context.Background(), req)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: %v, want InvalidArgument", req, err)
		}
	}
	resp := call(t, c, &rlsv3.RateLimitRequest{Domain: "nowhere", Descriptors: []*rlcommon.RateLimitDescriptor{desc("tenant", "a"), desc()}})
	check(t, resp, ok, none, none)
	if len(resp.ResponseHeadersToAdd) != 0 {
		t.Errorf("headers %v for an unknown domain", headers(resp))
	}
}

// failingStore fails every decision as an unreachable store does.
type failingStore struct{ ratelimit.Store }

func (failingStore) Decide(context.Context, []driver.Request, bool) ([]ratelimit.Decision, error) {
	return nil, ratelimit.ErrUnavailable
}

// TestStoreUnavailable: a store that cannot be reached makes the call fail
// with Unavailable (Envoy's failure_mode_deny then decides), unless no
// descriptor needs the store.
func TestStoreUnavailable(t *testing.T) {
	c := bufClient(t, failingStore{newMem(t, nil).Limits()}, nil)
	_, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{desc("tenant", "a")}})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("got %v, want Unavailable", err)
	}
	resp := call(t, c, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{desc("tenant", "internal"), desc("x", "y")}})
	check(t, resp, ok, none, none)
}

// slowStore answers when the call's context ends, as a store that does
// not answer in time.
type slowStore struct{ ratelimit.Store }

func (slowStore) Decide(ctx context.Context, _ []driver.Request, _ bool) ([]ratelimit.Decision, error) {
	<-ctx.Done()
	return nil, errors.Join(ratelimit.ErrUnavailable, ctx.Err())
}

// TestTimeout: Options.Timeout bounds the store's answer; the call fails
// with DeadlineExceeded.
func TestTimeout(t *testing.T) {
	c := bufClient(t, slowStore{newMem(t, nil).Limits()}, &rls.Options{Timeout: 10 * time.Millisecond})
	_, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{desc("tenant", "a")}})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("got %v, want DeadlineExceeded", err)
	}
}

// TestHealth: Serve answers the gRPC health service.
func TestHealth(t *testing.T) {
	srv, err := rls.NewServer(newMem(t, nil).Limits(), &rls.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := healthpb.NewHealthClient(serveTCP(t, srv))
	for _, svc := range []string{"", rls.ServiceName} {
		r, err := h.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q: %v %v", svc, r, err)
		}
	}
}

// TestConfigErrors checks what a configuration may not be; SetConfig keeps
// the configuration in force when given a bad one.
func TestConfigErrors(t *testing.T) {
	bad := map[string]string{
		"empty domain":       `{"domains":[{"domain":""}]}`,
		"domain twice":       `{"domains":[{"domain":"a"},{"domain":"a"}]}`,
		"no key":             `{"domain":"a","descriptors":[{"value":"v"}]}`,
		"descriptor twice":   `{"domain":"a","descriptors":[{"key":"k","value":"v"},{"key":"k","value":"v"}]}`,
		"key twice":          `{"domain":"a","descriptors":[{"key":"k"},{"key":"k"}]}`,
		"wildcard twice":     `{"domain":"a","descriptors":[{"key":"k","value":"x*"},{"key":"k","value":"x*"}]}`,
		"unknown field":      `{"domain":"a","descriptors":[{"key":"k","rate_limit":{"unit":"second","requests_per_unit":1,"replaces":[]}}]}`,
		"bad unit":           `{"domain":"a","descriptors":[{"key":"k","rate_limit":{"unit":"fortnight","requests_per_unit":1}}]}`,
		"no rate":            `{"domain":"a","descriptors":[{"key":"k","rate_limit":{"unit":"second"}}]}`,
		"rate too high":      `{"domain":"a","descriptors":[{"key":"k","rate_limit":{"unit":"second","requests_per_unit":50000001}}]}`,
		"unlimited and unit": `{"domain":"a","descriptors":[{"key":"k","rate_limit":{"unlimited":true,"unit":"second"}}]}`,
		"bad name":           `{"domain":"a","descriptors":[{"key":"k","rate_limit":{"name":"a b","unit":"second","requests_per_unit":1}}]}`,
		"bad algorithm":      `{"domain":"a","descriptors":[{"key":"k","rate_limit":{"unit":"second","requests_per_unit":1,"algorithm":"leaky"}}]}`,
		"burst on window":    `{"domain":"a","descriptors":[{"key":"k","rate_limit":{"unit":"second","requests_per_unit":1,"burst":5,"algorithm":"fixed-window"}}]}`,
		"bad header":         `{"response_headers":{"limit":"X Limit"}}`,
		"trailing data":      `{"domains":[]} {}`,
		"nested bad":         `{"domain":"a","descriptors":[{"key":"k","descriptors":[{"key":"j","rate_limit":{"unit":"minute"}}]}]}`,
	}
	for name, src := range bad {
		_, err := rls.Parse([]byte(src))
		if !errors.Is(err, rls.ErrConfig) || !errors.Is(err, ratelimit.ErrInvalid) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
	srv, err := rls.NewServer(newMem(t, nil).Limits(), mustConfig(t, testConfig), nil)
	if err != nil {
		t.Fatal(err)
	}
	bad2 := &rls.Config{Domains: []rls.Domain{{Domain: ""}}}
	if err := srv.SetConfig(bad2); !errors.Is(err, rls.ErrConfig) {
		t.Fatalf("SetConfig: %v", err)
	}
	c := rlsv3.NewRateLimitServiceClient(serveBuf(t, srv))
	resp := call(t, c, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{desc("tenant", "a")}})
	if resp.Statuses[0].CurrentLimit == nil {
		t.Error("the previous configuration is not in force after a bad SetConfig")
	}
	if _, err := rls.NewServer(nil, &rls.Config{}, nil); !errors.Is(err, ratelimit.ErrInvalid) {
		t.Errorf("nil store: %v", err)
	}
	var typedNil *failingStore
	if _, err := rls.NewServer(typedNil, &rls.Config{}, nil); !errors.Is(err, ratelimit.ErrInvalid) {
		t.Errorf("nil *failingStore: %v", err)
	}
	if _, err := rls.NewServer(newMem(t, nil).Limits(), &rls.Config{}, &rls.Options{Timeout: -1}); !errors.Is(err, ratelimit.ErrInvalid) {
		t.Errorf("negative timeout: %v", err)
	}
}

// TestSetConfig: a new configuration applies to the next call, and a rule
// whose limit name is unchanged keeps its counters.
func TestSetConfig(t *testing.T) {
	clock := &fakeClock{t: epoch}
	srv, err := rls.NewServer(newMem(t, &memstore.Options{Clock: clock.Now}).Limits(), mustConfig(t, `{"domain":"d","descriptors":[{"key":"k","rate_limit":{"name":"kept","unit":"hour","requests_per_unit":5}}]}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	c := rlsv3.NewRateLimitServiceClient(serveBuf(t, srv))
	req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{desc("k", "v")}}
	call(t, c, req)
	call(t, c, req)
	if err := srv.SetConfig(mustConfig(t, `{"domain":"d","descriptors":[{"key":"k","rate_limit":{"name":"kept","unit":"hour","requests_per_unit":5}},{"key":"j","rate_limit":{"unlimited":true}}]}`)); err != nil {
		t.Fatal(err)
	}
	resp := call(t, c, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{desc("k", "v"), desc("j", "v")}})
	check(t, resp, ok, want{ok, "kept", 5, rlsv3.RateLimitResponse_RateLimit_HOUR, 2, 36 * time.Minute}, none)
}

// TestLoadFile reads the same configuration as YAML and as JSON (a
// multi-domain document with response headers).
func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	y := filepath.Join(dir, "rls.yaml")
	j := filepath.Join(dir, "rls.json")
	os.WriteFile(y, []byte("domains:\n  - domain: a\n    descriptors:\n      - key: k\n        rate_limit: {unit: Second, requests_per_unit: 1}\nresponse_headers: {limit: l, remaining: r, reset: s}\n"), 0o600)
	os.WriteFile(j, []byte(`{"domains":[{"domain":"a","descriptors":[{"key":"k","rate_limit":{"unit":"Second","requests_per_unit":1}}]}],"response_headers":{"limit":"l","remaining":"r","reset":"s"}}`), 0o600)
	for _, p := range []string{y, j} {
		cfg, err := rls.LoadFile(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		srv, err := rls.NewServer(newMem(t, nil).Limits(), cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := srv.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "a", Descriptors: []*rlcommon.RateLimitDescriptor{desc("k", "x")}})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, h := range resp.ResponseHeadersToAdd {
			got[h.Key] = h.Value
		}
		if got["l"] != "1" || got["r"] != "0" || got["s"] != "1" {
			t.Errorf("%s: headers %v", p, resp.ResponseHeadersToAdd)
		}
	}
	if _, err := rls.LoadFile(filepath.Join(dir, "missing.yaml")); !errors.Is(err, rls.ErrConfig) {
		t.Errorf("missing file: %v", err)
	}
}
