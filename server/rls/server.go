package rls

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tenurekit/tenure"
	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/ratelimit/driver"
)

// ServiceName is the gRPC service the Server implements.
const ServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// Options configure a Server. Nil means the defaults.
type Options struct {
	// Timeout bounds the store round trips of one call, within the
	// caller's own deadline (Envoy sends its rate limit timeout as the
	// call's deadline). Default 0: the caller's deadline only.
	Timeout time.Duration
	// Logger receives store failures, at most one line a second. Default
	// slog.Default().
	Logger *slog.Logger
	// MaxDescriptors is the most descriptors one call may carry; a call
	// with more is refused (InvalidArgument) before anything is decided.
	// Default (0) DefaultMaxDescriptors; at most 10000.
	MaxDescriptors int
	// MaxEntries is the most entries one descriptor may carry. Default (0)
	// DefaultMaxEntries; at most 1000.
	MaxEntries int
	// MaxMessageBytes bounds a call's request message (Serve's
	// grpc.MaxRecvMsgSize). Default (0) DefaultMaxMessageBytes; at most
	// 4 MiB.
	MaxMessageBytes int
	// Credentials, when set, are the bearer tokens a call must present in
	// its "authorization" metadata ("Bearer TOKEN"; Envoy's grpc_service
	// initial_metadata sends it); a call without one is refused
	// (Unauthenticated), and one whose token is not allowed the call's
	// domain is refused (PermissionDenied). Empty: no token is asked for
	// (use it behind mTLS or on loopback only).
	Credentials []Credential
}

// Credential is one bearer token and the domains it may use.
type Credential struct {
	// Token is the bearer token (at least 16 bytes, tenure.TokenOf); it
	// never appears in logs or errors.
	Token tenure.Token
	// Domains are the rate limit domains the token may use; empty: every
	// domain.
	Domains []string
}

// The defaults of Options' call limits.
const (
	DefaultMaxDescriptors  = 64
	DefaultMaxEntries      = 16
	DefaultMaxMessageBytes = 64 << 10
)

// credential is a Credential as the server checks it.
type credential struct {
	sum     [32]byte
	domains map[string]bool // nil: every domain
}

// Server implements Envoy's RateLimitService (v3) over a ratelimit.Store.
// Every decision is the store's, on the store's clock: any number of
// Servers sharing a store and a configuration behave as one. It is safe
// for concurrent use.
type Server struct {
	rlsv3.UnimplementedRateLimitServiceServer
	store   ratelimit.Store
	cfg     atomic.Pointer[compiled]
	timeout time.Duration
	log     *slog.Logger
	logged  atomic.Int64 // unix nanoseconds of the last failure logged

	maxDescriptors, maxEntries, maxMessage int
	creds                                  []credential
}

// NewServer returns a Server deciding with store under cfg. Errors wrap
// ratelimit.ErrInvalid (ErrConfig for a bad configuration).
func NewServer(store ratelimit.Store, cfg *Config, o *Options) (*Server, error) {
	if isNil(store) {
		return nil, fmt.Errorf("rls: %w: nil store", ratelimit.ErrInvalid)
	}
	if o == nil {
		o = &Options{}
	}
	if o.Timeout < 0 {
		return nil, fmt.Errorf("rls: %w: negative timeout %v", ratelimit.ErrInvalid, o.Timeout)
	}
	s := &Server{store: store, timeout: o.Timeout, log: o.Logger,
		maxDescriptors: o.MaxDescriptors, maxEntries: o.MaxEntries, maxMessage: o.MaxMessageBytes}
	for _, l := range []struct {
		name     string
		v        *int
		def, top int
	}{
		{"MaxDescriptors", &s.maxDescriptors, DefaultMaxDescriptors, 10000},
		{"MaxEntries", &s.maxEntries, DefaultMaxEntries, 1000},
		{"MaxMessageBytes", &s.maxMessage, DefaultMaxMessageBytes, 4 << 20},
	} {
		switch {
		case *l.v == 0:
			*l.v = l.def
		case *l.v < 0 || *l.v > l.top:
			return nil, fmt.Errorf("rls: %w: Options.%s %d out of range [0, %d]", ratelimit.ErrInvalid, l.name, *l.v, l.top)
		}
	}
	seen := map[[32]byte]bool{}
	for i, c := range o.Credentials {
		tok := c.Token.Reveal()
		if len(tok) < 16 || strings.ContainsAny(tok, " \t\r\n") {
			return nil, fmt.Errorf("rls: %w: Options.Credentials[%d]: a token is at least 16 bytes without white space", ratelimit.ErrInvalid, i)
		}
		cr := credential{sum: sha256.Sum256([]byte(tok))}
		if seen[cr.sum] {
			return nil, fmt.Errorf("rls: %w: Options.Credentials[%d] repeats another token", ratelimit.ErrInvalid, i)
		}
		seen[cr.sum] = true
		if len(c.Domains) > 0 {
			cr.domains = map[string]bool{}
			for _, d := range c.Domains {
				cr.domains[d] = true
			}
		}
		s.creds = append(s.creds, cr)
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if err := s.SetConfig(cfg); err != nil {
		return nil, err
	}
	return s, nil
}

// SetConfig validates cfg and, if it is good, makes it the configuration
// of the calls that start from now on; a bad one is rejected with an
// error wrapping ErrConfig and the previous configuration stays in force.
// Counters carry over for every rule whose limit name is unchanged.
func (s *Server) SetConfig(cfg *Config) error {
	c, err := compile(cfg)
	if err != nil {
		return err
	}
	s.cfg.Store(c)
	return nil
}

// Register registers s as the RateLimitService of g.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	rlsv3.RegisterRateLimitServiceServer(g, s)
}

// Serve serves the RateLimitService and the standard gRPC health service
// (grpc.health.v1, SERVING for "" and ServiceName) on lis until ctx ends,
// with request messages bounded by Options.MaxMessageBytes (opts come
// after, so they may change it; pass grpc.Creds for TLS),
// then stops gracefully (at most 5 seconds, then hard). It returns nil
// after ctx ended, or the error that stopped the gRPC server.
func (s *Server) Serve(ctx context.Context, lis net.Listener, opts ...grpc.ServerOption) error {
	g := grpc.NewServer(append([]grpc.ServerOption{grpc.MaxRecvMsgSize(s.maxMessage)}, opts...)...)
	s.Register(g)
	hs := health.NewServer()
	hs.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(g, hs)
	errc := make(chan error, 1)
	go func() { errc <- g.Serve(lis) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	hs.Shutdown()
	done := make(chan struct{})
	go func() { g.GracefulStop(); close(done) }()
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		g.Stop()
		<-done
	}
	<-errc
	return nil
}

// authorize checks the call's bearer token against Options.Credentials
// (nothing to check without them).
func (s *Server) authorize(ctx context.Context, domain string) error {
	if len(s.creds) == 0 {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	var tok string
	for _, v := range md.Get("authorization") {
		if scheme, t, ok := strings.Cut(v, " "); ok && strings.EqualFold(scheme, "Bearer") {
			tok = strings.TrimSpace(t)
		}
	}
	if tok == "" {
		return status.Error(codes.Unauthenticated, "send authorization: Bearer <token> in the call's metadata")
	}
	sum := sha256.Sum256([]byte(tok))
	var found *credential
	for i := range s.creds {
		if subtle.ConstantTimeCompare(sum[:], s.creds[i].sum[:]) == 1 {
			found = &s.creds[i]
		}
	}
	switch {
	case found == nil:
		return status.Error(codes.Unauthenticated, "unknown token")
	case found.domains != nil && !found.domains[domain]:
		return status.Errorf(codes.PermissionDenied, "the token may not use domain %q", domain)
	}
	return nil
}

// slot is one piece of limiter state a call decides: the descriptors
// (by index) that map to it and their summed hits.
type slot struct {
	r    *rule
	key  driver.StateKey
	hits uint64
	idx  []int
	d    ratelimit.Decision
	over bool // denied (or more hits than the limit can ever admit)
}

// ShouldRateLimit decides a request (see the package documentation): the
// statuses in request order, OVER_LIMIT when an enforced limit is over,
// the x-ratelimit headers; an InvalidArgument error for an empty domain or
// descriptor list; Unavailable when the store cannot be reached.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if err := s.authorize(ctx, req.GetDomain()); err != nil {
		return nil, err
	}
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	ds := req.GetDescriptors()
	if len(ds) == 0 {
		return nil, status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	if len(ds) > s.maxDescriptors {
		return nil, status.Errorf(codes.InvalidArgument, "%d descriptors in one call, at most %d", len(ds), s.maxDescriptors)
	}
	for _, d := range ds {
		if n := len(d.GetEntries()); n > s.maxEntries {
			return nil, status.Errorf(codes.InvalidArgument, "a descriptor with %d entries, at most %d", n, s.maxEntries)
		}
	}
	cfg := s.cfg.Load()
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(ds))}
	for i := range ds {
		resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
	}
	dom := cfg.domains[req.GetDomain()]
	if dom == nil {
		return resp, nil // an unknown domain limits nothing, as envoyproxy/ratelimit does
	}
	var commit, peek []*slot
	byKey := map[driver.StateKey]*slot{}
	peekKey := map[driver.StateKey]*slot{}
	for i, d := range ds {
		r := dom.match(d.GetEntries())
		if r == nil || r.unlimited {
			continue
		}
		hits := uint64(max(1, req.GetHitsAddend()))
		if h := d.GetHitsAddend(); h != nil {
			hits = h.GetValue()
		}
		if d.GetIsNegativeHits() {
			hits = 0 // refunds are not supported: only read the state
		}
		k := driver.StateKey{Group: dom.group, Name: r.limit.Name, Kind: r.kind, Key: descriptorKey(req.GetDomain(), d.GetEntries())}
		m, list := byKey, &commit
		if hits == 0 {
			m, list = peekKey, &peek
		}
		sl := m[k]
		if sl == nil {
			sl = &slot{r: r, key: k}
			m[k] = sl
			*list = append(*list, sl)
		}
		sl.hits = satAdd(sl.hits, hits)
		sl.idx = append(sl.idx, i)
	}
	if len(commit)+len(peek) == 0 {
		return resp, nil
	}
	if s.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	over, err := s.decideCommit(ctx, commit, &peek)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	if err := s.decide(ctx, peek, false); err != nil {
		return nil, s.fail(ctx, err)
	}
	if over {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	bySlot := make([]*slot, len(ds))
	for _, sl := range append(commit, peek...) {
		st := s.status(sl)
		for _, i := range sl.idx {
			resp.Statuses[i], bySlot[i] = st, sl
		}
	}
	// The headers describe the first enforced descriptor over its limit,
	// or else the enforced one with the fewest hits remaining.
	var pick *slot
	for _, sl := range bySlot {
		if sl == nil || sl.r.shadow {
			continue
		}
		if pick == nil || sl.over && !pick.over || sl.over == pick.over && !pick.over && sl.d.Remaining < pick.d.Remaining {
			pick = sl
		}
	}
	if pick != nil && !cfg.headers.Disabled {
		st := resp.Statuses[pick.idx[0]]
		resp.ResponseHeadersToAdd = []*corev3.HeaderValue{
			{Key: cfg.headers.Limit, Value: strconv.Itoa(pick.r.rpu)},
			{Key: cfg.headers.Remaining, Value: strconv.FormatUint(uint64(st.LimitRemaining), 10)},
			{Key: cfg.headers.Reset, Value: strconv.FormatInt(ceilSeconds(st.DurationUntilReset.AsDuration()), 10)},
		}
	}
	return resp, nil
}

// decideCommit decides the slots that consume hits, at most
// ratelimit.MaxGroup at a time, each batch all or nothing: a request over
// an enforced limit consumes nothing from any limit of its batch (and
// later batches are only read). A batch denied only by shadow-mode limits
// is decided again without them, so that the request, which passes,
// is counted by every other limit. Slots that are only read are added to
// *peek. It reports whether an enforced limit is over.
func (s *Server) decideCommit(ctx context.Context, commit []*slot, peek *[]*slot) (bool, error) {
	over := false
	for len(commit) > 0 {
		batch := commit[:min(len(commit), ratelimit.MaxGroup)]
		commit = commit[len(batch):]
		var active []*slot
		for _, sl := range batch {
			if sl.hits > uint64(sl.r.limit.Capacity()) {
				// More than the limit can ever admit at once: over, and
				// only read.
				sl.over = true
				*peek = append(*peek, sl)
				over = over || !sl.r.shadow
				continue
			}
			active = append(active, sl)
		}
		if over {
			*peek = append(*peek, active...)
			continue
		}
		for len(active) > 0 {
			if err := s.decide(ctx, active, true); err != nil {
				return false, err
			}
			enforced, shadow := false, false
			for _, sl := range active {
				if !sl.d.Allowed {
					enforced = enforced || !sl.r.shadow
					shadow = shadow || sl.r.shadow
				}
			}
			if enforced {
				over = true
				break
			}
			if !shadow {
				break
			}
			rest := active[:0:0]
			for _, sl := range active {
				if sl.d.Allowed {
					rest = append(rest, sl)
				}
			}
			active = rest
		}
	}
	return over, nil
}

// decide asks the store about slots (peek: commit false) in batches of at
// most ratelimit.MaxGroup distinct keys (a slot only read can share its
// key with one that was to be charged) and records each slot's decision.
func (s *Server) decide(ctx context.Context, slots []*slot, commit bool) error {
	for len(slots) > 0 {
		n, seen := 0, map[driver.StateKey]bool{}
		for n < len(slots) && n < ratelimit.MaxGroup && !seen[slots[n].key] {
			seen[slots[n].key] = true
			n++
		}
		batch := slots[:n]
		slots = slots[n:]
		reqs := make([]driver.Request, len(batch))
		for i, sl := range batch {
			n := sl.hits
			if sl.over || !commit && n > uint64(sl.r.limit.Capacity()) {
				n = 0
			}
			reqs[i] = driver.Request{Key: sl.key, Algorithm: sl.r.alg, Limit: sl.r.limit, N: int(n)}
		}
		got, err := s.store.Decide(ctx, reqs, commit)
		if err != nil {
			return err
		}
		if len(got) != len(reqs) {
			return fmt.Errorf("rls: the store returned %d decisions for %d requests", len(got), len(reqs))
		}
		for i, sl := range batch {
			sl.d = got[i]
			if sl.over {
				sl.d.Allowed = false
			}
			sl.over = !sl.d.Allowed
		}
	}
	return nil
}

// status builds the DescriptorStatus of a decided slot.
func (s *Server) status(sl *slot) *rlsv3.RateLimitResponse_DescriptorStatus {
	d := sl.d
	code := rlsv3.RateLimitResponse_OK
	if !d.Allowed && !sl.r.shadow {
		code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	reset := d.ResetAfter
	if !d.Allowed && d.RetryAfter > 0 {
		reset = d.RetryAfter
	}
	rem := uint32(0)
	if d.Remaining > 0 {
		rem = uint32(min(int64(d.Remaining), math.MaxUint32))
	}
	return &rlsv3.RateLimitResponse_DescriptorStatus{
		Code: code,
		CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{
			Name:            sl.r.limit.Name,
			RequestsPerUnit: uint32(sl.r.rpu),
			Unit:            unitEnum[sl.r.unit],
		},
		LimitRemaining:     rem,
		DurationUntilReset: durationpb.New(reset),
	}
}

// fail turns a store error into the call's gRPC error: Unavailable when
// the store could not be reached (Envoy's failure_mode_deny then decides),
// DeadlineExceeded or Canceled when the call's context ended first.
func (s *Server) fail(ctx context.Context, err error) error {
	now := time.Now().UnixNano()
	if last := s.logged.Load(); now-last >= int64(time.Second) && s.logged.CompareAndSwap(last, now) {
		s.log.Warn("rls: rate limit store failed", "err", err)
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded) || ctx.Err() == context.DeadlineExceeded:
		return status.Error(codes.DeadlineExceeded, "rate limit store did not answer in time")
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "call canceled")
	case errors.Is(err, ratelimit.ErrUnavailable):
		return status.Error(codes.Unavailable, "rate limit store unavailable")
	}
	return status.Error(codes.Internal, "rate limit decision failed")
}

var unitEnum = map[string]rlsv3.RateLimitResponse_RateLimit_Unit{
	"second": rlsv3.RateLimitResponse_RateLimit_SECOND,
	"minute": rlsv3.RateLimitResponse_RateLimit_MINUTE,
	"hour":   rlsv3.RateLimitResponse_RateLimit_HOUR,
	"day":    rlsv3.RateLimitResponse_RateLimit_DAY,
	"week":   rlsv3.RateLimitResponse_RateLimit_WEEK,
	"month":  rlsv3.RateLimitResponse_RateLimit_MONTH,
	"year":   rlsv3.RateLimitResponse_RateLimit_YEAR,
}

// match finds the rule a request descriptor's entries reach, as
// envoyproxy/ratelimit does: entry by entry down the tree (an exact value
// first, then a wildcard, then the descriptor without a value), the rule
// of the node the last entry lands on; nil when an entry matches nothing
// or the last node has no rule.
func (d *compiledDomain) match(entries []*rlcommon.RateLimitDescriptor_Entry) *rule {
	lv := d.top
	for i, e := range entries {
		lk := lv[e.GetKey()]
		if lk == nil {
			return nil
		}
		n := lk.exact[e.GetValue()]
		if n == nil {
			for _, w := range lk.wild {
				if strings.HasPrefix(e.GetValue(), w.prefix) {
					n = w.n
					break
				}
			}
		}
		if n == nil {
			n = lk.any
		}
		if n == nil {
			return nil
		}
		if i == len(entries)-1 {
			return n.rule
		}
		if n.sub == nil {
			return nil
		}
		lv = n.sub
	}
	return nil
}

// descriptorKey is the store key of a descriptor: the domain and every
// entry's key and value, joined as ratelimit.Join joins keys (injective),
// then passed through ratelimit.NormalizeKey (hashed when not a valid key
// as it is, still injective).
func descriptorKey(domain string, entries []*rlcommon.RateLimitDescriptor_Entry) string {
	parts := make([]string, 0, 1+2*len(entries))
	parts = append(parts, domain)
	for _, e := range entries {
		parts = append(parts, e.GetKey(), e.GetValue())
	}
	return ratelimit.NormalizeKey(joinEscaped(parts))
}

// joinEscaped joins parts with '|', escaping '\' and '|' in each with a
// '\' (the form ratelimit.Join produces): distinct non-empty lists give
// distinct strings.
func joinEscaped(parts []string) string {
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteByte('|')
		}
		for j := 0; j < len(p); j++ {
			if c := p[j]; c == '\\' || c == '|' {
				b.WriteByte('\\')
			}
			b.WriteByte(p[j])
		}
	}
	return b.String()
}

func satAdd(a, b uint64) uint64 {
	if a+b < a {
		return math.MaxUint64
	}
	return a + b
}

// ceilSeconds rounds d up to whole seconds (0 stays 0).
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// isNil reports whether s is nil or an interface holding a nil pointer
// (a store a backend without rate limits may hand out).
func isNil(s ratelimit.Store) bool {
	if s == nil {
		return true
	}
	v := reflect.ValueOf(s)
	switch v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// nopStore is the store compile validates limits with; it is never asked
// anything.
type nopStore struct{}

func (nopStore) Decide(context.Context, []driver.Request, bool) ([]ratelimit.Decision, error) {
	return nil, ratelimit.ErrUnavailable
}
func (nopStore) Reset(context.Context, []driver.StateKey) error { return ratelimit.ErrUnavailable }
func (nopStore) AcquirePermit(context.Context, driver.StateKey, string, int, time.Duration) (driver.PermitGrant, error) {
	return driver.PermitGrant{}, ratelimit.ErrUnavailable
}
func (nopStore) RenewPermit(context.Context, driver.StateKey, string, time.Duration) (driver.PermitGrant, error) {
	return driver.PermitGrant{}, ratelimit.ErrUnavailable
}
func (nopStore) ReleasePermit(context.Context, driver.StateKey, string) error {
	return ratelimit.ErrUnavailable
}
