package ratelimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenurekit/tenure/internal/limitmem"
	"github.com/tenurekit/tenure/ratelimit/driver"
)

// KeyFunc derives the key a request is limited under. It returns ErrNoKey
// when its limit does not apply to the request (an anonymous request under
// a per-user limit, say). The middleware passes every key it returns
// through NormalizeKey, so a key built from request input that is not
// valid as-is (bytes that are not UTF-8, NUL, more than MaxKeyLen bytes)
// still limits the request, under a hashed key.
type KeyFunc func(r *http.Request) (string, error)

// ErrNoKey reports that a KeyFunc has no key for a request: its limit is
// skipped for that request.
var ErrNoKey = errors.New("ratelimit: no key for this request")

// IPOptions configure ClientIP. Nil means the defaults.
type IPOptions struct {
	// TrustedProxies are the networks of the proxies in front of the
	// service. Only a request whose peer (RemoteAddr) is in one of them has
	// its forwarding header read; then the client is the rightmost address
	// of the header that is not itself a trusted proxy. Default: none, so
	// the client is the peer and a header sent by the client itself can
	// never choose its key. Each prefix must be valid.
	TrustedProxies []netip.Prefix
	// Header is the forwarding header trusted proxies set: "X-Forwarded-For"
	// (the default) or "X-Real-IP" (one address), or another header name
	// holding comma-separated addresses.
	Header string
	// IPv6Prefix is the prefix length IPv6 clients are folded to: a host
	// usually holds a whole /64, so limiting single addresses is easy to
	// evade. 1 to 128; default (0) 64; 128 keys single addresses.
	IPv6Prefix int
	// IPv4Prefix is the prefix length of IPv4 clients: 1 to 32; default
	// (0) 32.
	IPv4Prefix int
}

// withDefaults validates o and fills in the defaults. Errors wrap
// ErrInvalid.
func (o *IPOptions) withDefaults() (IPOptions, error) {
	var opt IPOptions
	if o != nil {
		opt = *o
	}
	if opt.Header == "" {
		opt.Header = "X-Forwarded-For"
	}
	if !validHeaderName(opt.Header) {
		return IPOptions{}, fmt.Errorf("%w: forwarding header %q is not a header name", ErrInvalid, opt.Header)
	}
	if opt.IPv6Prefix == 0 {
		opt.IPv6Prefix = 64
	}
	if opt.IPv6Prefix < 1 || opt.IPv6Prefix > 128 {
		return IPOptions{}, fmt.Errorf("%w: IPv6Prefix %d out of range [1, 128]", ErrInvalid, opt.IPv6Prefix)
	}
	if opt.IPv4Prefix == 0 {
		opt.IPv4Prefix = 32
	}
	if opt.IPv4Prefix < 1 || opt.IPv4Prefix > 32 {
		return IPOptions{}, fmt.Errorf("%w: IPv4Prefix %d out of range [1, 32]", ErrInvalid, opt.IPv4Prefix)
	}
	for i, p := range opt.TrustedProxies {
		if !p.IsValid() {
			return IPOptions{}, fmt.Errorf("%w: trusted proxy network %d is not a valid prefix", ErrInvalid, i)
		}
	}
	opt.TrustedProxies = append([]netip.Prefix(nil), opt.TrustedProxies...)
	return opt, nil
}

// validHeaderName reports whether s is an HTTP field name (a token).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// NonIPPeerPrefix starts the key ClientIP gives a request whose peer
// address (RemoteAddr) is not an IP address: a Unix socket peer ("@", "",
// or a path). The key is the prefix and the address ("unix:@"), passed
// through NormalizeKey, so such peers are limited together per address.
const NonIPPeerPrefix = "unix:"

// NewClientIP validates o and returns the key function ClientIP(o)
// describes. Errors wrap ErrInvalid.
func NewClientIP(o *IPOptions) (KeyFunc, error) {
	opt, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	return clientIP(opt), nil
}

// ClientIP keys requests by client address: the peer's, or with trusted
// proxies (opt-in) the address they forwarded. IPv6 addresses are folded to
// their /64 (IPv4-mapped IPv6 addresses count as IPv4; zones are dropped).
// Keys look like "ip:203.0.113.7" and "ip:2001:db8:1:2::/64". A peer that
// is not an IP address (a Unix socket) is keyed NonIPPeerPrefix + its
// address, such as "unix:@". Invalid options (see NewClientIP, which
// reports them when the key function is made) give a key function that
// fails every request with that error, which the middleware answers with
// 500.
func ClientIP(o *IPOptions) KeyFunc {
	f, err := NewClientIP(o)
	if err != nil {
		return func(*http.Request) (string, error) { return "", err }
	}
	return f
}

func clientIP(opt IPOptions) KeyFunc {
	trusted := func(a netip.Addr) bool {
		for _, p := range opt.TrustedProxies {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	return func(r *http.Request) (string, error) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		peer, err := netip.ParseAddr(host)
		if err != nil {
			return NormalizeKey(NonIPPeerPrefix + r.RemoteAddr), nil
		}
		client := peer.Unmap().WithZone("")
		if len(opt.TrustedProxies) > 0 && trusted(client) {
			client = forwarded(r, opt.Header, client, trusted)
		}
		return ipKey(client, opt.IPv4Prefix, opt.IPv6Prefix), nil
	}
}

// ipKey is the key of a (zoneless, unmapped) address folded to its prefix.
func ipKey(a netip.Addr, v4, v6 int) string {
	bits := v4
	if a.Is6() {
		bits = v6
	}
	p, _ := a.Prefix(bits)
	if p.Bits() == a.BitLen() {
		return "ip:" + p.Addr().String()
	}
	return "ip:" + p.String()
}

// forwarded walks the forwarding header from the right, past trusted
// proxies, and returns the first other address; an unparsable entry stops
// the walk at the last trusted hop (whose traffic is then limited together).
func forwarded(r *http.Request, header string, peer netip.Addr, trusted func(netip.Addr) bool) netip.Addr {
	var hops []string
	for _, v := range r.Header.Values(header) {
		for _, h := range strings.Split(v, ",") {
			if h = strings.TrimSpace(h); h != "" {
				hops = append(hops, h)
			}
		}
	}
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		h := hops[i]
		if ap, err := netip.ParseAddrPort(h); err == nil {
			h = ap.Addr().String()
		}
		a, err := netip.ParseAddr(strings.Trim(h, "[]"))
		if err != nil {
			return client
		}
		client = a.Unmap().WithZone("")
		if !trusted(client) {
			return client
		}
	}
	return client
}

// Header keys requests by the value of a request header (an API key, say),
// hashed with SHA-256 so that a credential never lands in the store's keys
// or logs: "h:<32 hex digits>". A request without the header has no key.
func Header(name string) KeyFunc {
	return func(r *http.Request) (string, error) {
		v := r.Header.Get(name)
		if v == "" {
			return "", ErrNoKey
		}
		sum := sha256.Sum256([]byte(v))
		return "h:" + hex.EncodeToString(sum[:16]), nil
	}
}

// User keys requests by the user id that id returns (from the request's
// context, say): "u:<id>". An empty id (an anonymous request) has no key.
func User(id func(r *http.Request) string) KeyFunc {
	return func(r *http.Request) (string, error) {
		u := id(r)
		if u == "" {
			return "", ErrNoKey
		}
		return "u:" + u, nil
	}
}

// Route keys requests by their route: the ServeMux pattern that matched
// (Request.Pattern, set when the middleware wraps a handler registered on
// a ServeMux), or else the method and path. Paths with ids in them make
// one key per id; wrap the routed handlers to key by pattern.
func Route() KeyFunc {
	return func(r *http.Request) (string, error) {
		if r.Pattern != "" {
			return "r:" + r.Pattern, nil
		}
		return "r:" + r.Method + " " + r.URL.Path, nil
	}
}

// Const keys every request the same: a global limit.
func Const(key string) KeyFunc {
	return func(*http.Request) (string, error) { return key, nil }
}

// Join keys requests by several keys at once (per user and route, say):
// the keys joined with '|', each with its '\' and '|' escaped by a '\'
// (so "a|b" joined with "c" and "a" joined with "b|c" give different
// keys). If any of them has no key, neither has Join.
func Join(fns ...KeyFunc) KeyFunc {
	return func(r *http.Request) (string, error) {
		parts := make([]string, len(fns))
		for i, f := range fns {
			k, err := f(r)
			if err != nil {
				return "", err
			}
			parts[i] = k
		}
		return joinKeys(parts), nil
	}
}

// joinKeys joins parts with '|', escaping '\' and '|' in each: distinct
// lists of the same length give distinct results.
func joinKeys(parts []string) string {
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteByte('|')
		}
		if !strings.ContainsAny(p, "\\|") {
			b.WriteString(p)
			continue
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

// Rule is one limit applied by the middleware: a Limiter and the key each
// request is limited under.
type Rule struct {
	Limiter *Limiter
	Key     KeyFunc
}

// FailurePolicy says what the middleware does when the store cannot
// answer.
type FailurePolicy int

const (
	// FailClosed refuses requests with 503 and a problem+json body of type
	// temporary-reduced-capacity. The default.
	FailClosed FailurePolicy = iota
	// FailOpen lets requests through unlimited.
	FailOpen
	// FailLocal limits requests with an in-process limiter per rule, at
	// LocalShare of each limit (with N instances behind a balancer, a share
	// of 1/N keeps the total near the limit).
	FailLocal
)

// MiddlewareOptions configure a Middleware.
type MiddlewareOptions struct {
	// Rules are the limits applied. Several rules are checked all or
	// nothing in one atomic step (as a Group named Group): a request denied
	// by one limit is charged to none. A rule whose key function returns
	// ErrNoKey is skipped for that request. Required: 1 to MaxGroup rules
	// on one store.
	Rules []Rule
	// Group names the Group of a middleware with several rules (the rules
	// of a Limit's Name). Default "http". With one rule the Limiter is used
	// directly.
	Group string
	// Cost is the number of units a request consumes. Default 1. A cost
	// above a limit's capacity is refused with 429 (it could never pass).
	Cost func(r *http.Request) int
	// OnFailure is the failure policy. Default FailClosed.
	OnFailure FailurePolicy
	// LocalShare is the share of each limit the local limiter admits under
	// FailLocal, in (0, 1]: Rate and Burst are scaled by it (rounded down,
	// at least 1). Required with FailLocal; NaN, infinities and values
	// outside (0, 1] are refused.
	LocalShare float64
	// LocalMaxKeys is the most entries (one per key and rule) the local
	// limiter holds under FailLocal. Expired entries are released as new
	// ones come; when it is full and none has expired, a request that needs
	// a new entry is refused with 429 until the soonest entry expires (the
	// local limiter never admits past a limit). Default (0)
	// DefaultLocalMaxKeys; negative values are refused.
	LocalMaxKeys int
	// Timeout bounds each store call; when it runs out the failure policy
	// applies. Default (0) 500ms; negative values are refused.
	Timeout time.Duration
	// NoHeaders leaves out the RateLimit-Policy and RateLimit fields from
	// responses (429 responses still carry Retry-After). Default false.
	NoHeaders bool
	// Logger receives store failures (at most one record per second).
	// Default slog.Default().
	Logger *slog.Logger
}

// Middleware applies rate limits to HTTP requests. Every response of a
// limited request carries the RateLimit-Policy and RateLimit fields of the
// IETF draft draft-ietf-httpapi-ratelimit-headers, one item per rule:
//
//	RateLimit-Policy: "per-user";q=100;w=60
//	RateLimit: "per-user";r=42;t=17
//
// q is the limit's Rate, w its Period in seconds (left out when the period
// is not a whole number of seconds), r the units remaining and t the
// seconds until they are all available again (for a denied limit: until
// the request would pass). A refused request gets 429 with an integer
// Retry-After (seconds, rounded up, at least 1) and an
// application/problem+json body of type quota-exceeded naming the violated
// policies.
type Middleware struct {
	o      MiddlewareOptions
	single bool
	groups sync.Map // uint32 mask of the rules that apply -> *Group
	local  []*Limiter
	lstore *limitmem.Engine // the local limiters' store (FailLocal)
	lgroup sync.Map         // mask -> *Group of local limiters
	log    *slog.Logger
	logged atomic.Int64 // unix nanos of the last failure record

	allowed, limited, storeErrors, failedOpen, failedClosed, localUsed, invalid atomic.Uint64
}

// NewMiddleware validates o and returns the middleware. Errors wrap
// ErrInvalid.
func NewMiddleware(o MiddlewareOptions) (*Middleware, error) {
	return newMiddleware(o, nil)
}

// DefaultLocalMaxKeys is the default of MiddlewareOptions.LocalMaxKeys.
const DefaultLocalMaxKeys = 100_000

// newMiddleware is NewMiddleware with the local limiter's clock (nil: the
// process's).
func newMiddleware(o MiddlewareOptions, now func() time.Time) (*Middleware, error) {
	if len(o.Rules) == 0 || len(o.Rules) > MaxGroup {
		return nil, fmt.Errorf("%w: a middleware needs 1 to %d rules", ErrInvalid, MaxGroup)
	}
	for i, r := range o.Rules {
		if r.Limiter == nil || r.Key == nil {
			return nil, fmt.Errorf("%w: rule %d needs a Limiter and a Key", ErrInvalid, i)
		}
	}
	if o.Group == "" {
		o.Group = "http"
	}
	if err := driver.ValidateName("group name", o.Group); err != nil {
		return nil, err
	}
	if o.Timeout < 0 {
		return nil, fmt.Errorf("%w: negative timeout %v", ErrInvalid, o.Timeout)
	}
	if o.Timeout == 0 {
		o.Timeout = 500 * time.Millisecond
	}
	if o.LocalMaxKeys < 0 {
		return nil, fmt.Errorf("%w: negative LocalMaxKeys %d", ErrInvalid, o.LocalMaxKeys)
	}
	if o.LocalMaxKeys == 0 {
		o.LocalMaxKeys = DefaultLocalMaxKeys
	}
	if o.LocalShare != 0 && !(o.LocalShare > 0 && o.LocalShare <= 1) {
		return nil, fmt.Errorf("%w: LocalShare %v out of range (0, 1]", ErrInvalid, o.LocalShare)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.OnFailure < FailClosed || o.OnFailure > FailLocal {
		return nil, fmt.Errorf("%w: unknown failure policy %d", ErrInvalid, o.OnFailure)
	}
	m := &Middleware{o: o, single: len(o.Rules) == 1, log: o.Logger}
	if !m.single {
		ls := make([]*Limiter, len(o.Rules))
		for i, r := range o.Rules {
			ls[i] = r.Limiter
		}
		if _, err := NewGroup(o.Group, ls...); err != nil {
			return nil, err
		}
	}
	if o.OnFailure == FailLocal {
		if !(o.LocalShare > 0 && o.LocalShare <= 1) {
			return nil, fmt.Errorf("%w: FailLocal needs a LocalShare in (0, 1], not %v", ErrInvalid, o.LocalShare)
		}
		// The local limiter is an in-process store on the process's clock
		// that deletes state as soon as it expired, holds at most
		// LocalMaxKeys entries and, when full, refuses decisions that need
		// a new one: it never admits past a limit.
		ls := limitmem.New(limitmem.Options{Name: "ratelimit", Now: now, MaxKeys: o.LocalMaxKeys})
		m.lstore = ls
		for _, r := range o.Rules {
			l := r.Limiter.Limit()
			scaled := Limit{Name: l.Name, Period: l.Period,
				Rate: max(1, int(math.Floor(float64(l.Rate)*o.LocalShare)))}
			if r.Limiter.Algorithm() == GCRA {
				scaled.Burst = max(1, int(math.Floor(float64(l.Burst)*o.LocalShare)))
			}
			ll, err := New(ls, r.Limiter.Algorithm(), scaled, nil)
			if err != nil {
				return nil, err
			}
			m.local = append(m.local, ll)
		}
	}
	return m, nil
}

// MiddlewareStats counts what the middleware did.
type MiddlewareStats struct {
	// Allowed and Limited count requests the limits let through and
	// refused (by the store or, under FailLocal, the local limiter).
	Allowed, Limited uint64
	// StoreErrors counts requests whose store call failed; FailedOpen and
	// FailedClosed count those let through and refused with 503 by the
	// failure policy, LocalUsed those the local limiter judged.
	StoreErrors, FailedOpen, FailedClosed, LocalUsed uint64
	// Invalid counts requests refused with 500 because they could not be
	// limited: a key function failed (other than with ErrNoKey) or a
	// decision was refused with ErrInvalid. They are not store errors: the
	// failure policy never applies to them.
	Invalid uint64
}

// Stats returns the middleware's counters.
func (m *Middleware) Stats() MiddlewareStats {
	return MiddlewareStats{
		Allowed: m.allowed.Load(), Limited: m.limited.Load(),
		StoreErrors: m.storeErrors.Load(), FailedOpen: m.failedOpen.Load(),
		FailedClosed: m.failedClosed.Load(), LocalUsed: m.localUsed.Load(),
		Invalid: m.invalid.Load(),
	}
}

// group returns the Group over the rules in mask (limiters from ls).
func (m *Middleware) group(cache *sync.Map, ls func(i int) *Limiter, mask uint32) (*Group, error) {
	if g, ok := cache.Load(mask); ok {
		return g.(*Group), nil
	}
	var members []*Limiter
	for i := range m.o.Rules {
		if mask&(1<<i) != 0 {
			members = append(members, ls(i))
		}
	}
	g, err := NewGroup(m.o.Group, members...)
	if err != nil {
		return nil, err
	}
	cache.Store(mask, g)
	return g, nil
}

// decide judges a request's keys under the rules in mask.
func (m *Middleware) decide(ctx context.Context, local bool, mask uint32, keys []string, n int) ([]Decision, error) {
	lim := func(i int) *Limiter { return m.o.Rules[i].Limiter }
	cache := &m.groups
	if local {
		lim = func(i int) *Limiter { return m.local[i] }
		cache = &m.lgroup
	}
	if m.single {
		d, err := lim(0).AllowN(ctx, keys[0], n)
		return []Decision{d}, err
	}
	g, err := m.group(cache, lim, mask)
	if err != nil {
		return nil, err
	}
	_, ds, err := g.AllowN(ctx, keys, n)
	return ds, err
}

// Handler wraps next with the limits.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var (
			mask uint32
			keys []string
			lims []*Limiter
		)
		for i, rule := range m.o.Rules {
			k, err := rule.Key(r)
			if errors.Is(err, ErrNoKey) {
				continue
			}
			if err != nil {
				m.invalidRequest(w)
				return
			}
			mask |= 1 << i
			keys = append(keys, NormalizeKey(k))
			lims = append(lims, rule.Limiter)
		}
		if mask == 0 {
			next.ServeHTTP(w, r)
			return
		}
		n := 1
		if m.o.Cost != nil {
			n = m.o.Cost(r)
		}
		for _, l := range lims {
			if n < 1 || n > l.Limit().Capacity() {
				m.limited.Add(1)
				m.problem(w, http.StatusTooManyRequests, problemQuota, titleQuota,
					fmt.Sprintf("the request costs %d units, more than the quota of %q can ever admit", n, l.Limit().Name), []string{l.Limit().Name})
				return
			}
		}
		ctx, cancel := context.WithTimeout(r.Context(), m.o.Timeout)
		ds, err := m.decide(ctx, false, mask, keys, n)
		cancel()
		if errors.Is(err, ErrInvalid) {
			// A refused argument is not an outage: the failure policy
			// (which may let the request through) does not apply.
			m.invalidRequest(w)
			return
		}
		if err != nil {
			m.storeErrors.Add(1)
			m.logFailure(err)
			switch m.o.OnFailure {
			case FailOpen:
				m.failedOpen.Add(1)
				next.ServeHTTP(w, r)
				return
			case FailLocal:
				m.localUsed.Add(1)
				ds, err = m.decide(r.Context(), true, mask, keys, n)
				if errors.Is(err, ErrInvalid) {
					m.invalidRequest(w)
					return
				}
			}
			if err != nil {
				m.failedClosed.Add(1)
				w.Header().Set("Retry-After", "1")
				m.problem(w, http.StatusServiceUnavailable, problemCapacity, titleCapacity,
					"the rate limit store could not be reached", nil)
				return
			}
		}
		c := Combine(ds)
		if !m.o.NoHeaders {
			setFields(w.Header(), ds)
		}
		if c.Allowed {
			m.allowed.Add(1)
			next.ServeHTTP(w, r)
			return
		}
		m.limited.Add(1)
		var violated []string
		for _, d := range ds {
			if !d.Allowed {
				violated = append(violated, d.Limit.Name)
			}
		}
		w.Header().Set("Retry-After", strconv.FormatInt(ceilSeconds(c.RetryAfter), 10))
		m.problem(w, http.StatusTooManyRequests, problemQuota, titleQuota,
			fmt.Sprintf("quota exceeded; retry in %v", c.RetryAfter.Round(time.Millisecond)), violated)
	})
}

// invalidRequest refuses a request that cannot be limited: a key function
// failed, or the decision was refused as invalid. It is counted as Invalid,
// never as a store error, and the failure policy does not apply.
func (m *Middleware) invalidRequest(w http.ResponseWriter) {
	m.invalid.Add(1)
	m.problem(w, http.StatusInternalServerError, "about:blank", "Rate limit key",
		"the request's rate limit could not be determined", nil)
}

// The problem types of draft-ietf-httpapi-ratelimit-headers.
const (
	problemQuota    = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	titleQuota      = "Request cannot be satisfied as assigned quota has been exceeded"
	problemCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
	titleCapacity   = "Request cannot be satisfied due to temporary server capacity constraints"
)

// ceilSeconds rounds d up to whole seconds, at least 1 (Retry-After 0
// would invite an immediate retry that fails again).
func ceilSeconds(d time.Duration) int64 {
	return max(1, int64((d+time.Second-1)/time.Second))
}

// SetHeaders sets on h the fields Middleware sends for decisions (one
// Decision per rule, judged together): RateLimit-Policy and RateLimit, and
// when the decisions deny, Retry-After in whole seconds (rounded up, at
// least 1). It is for services that decide outside Middleware (a gRPC
// gateway, tenure serve's allowRate) and answer over HTTP.
func SetHeaders(h http.Header, ds []Decision) {
	if len(ds) == 0 {
		return
	}
	setFields(h, ds)
	if c := Combine(ds); !c.Allowed {
		h.Set("Retry-After", strconv.FormatInt(ceilSeconds(c.RetryAfter), 10))
	}
}

// setFields sets RateLimit-Policy and RateLimit for decisions.
func setFields(h http.Header, ds []Decision) {
	var pol, cur []byte
	for i, d := range ds {
		if i > 0 {
			pol = append(pol, ", "...)
			cur = append(cur, ", "...)
		}
		l := d.Limit
		pol = strconv.AppendQuote(pol, l.Name)
		pol = append(pol, ";q="...)
		pol = strconv.AppendInt(pol, int64(l.Rate), 10)
		if l.Period%time.Second == 0 {
			pol = append(pol, ";w="...)
			pol = strconv.AppendInt(pol, int64(l.Period/time.Second), 10)
		}
		t := d.ResetAfter
		if !d.Allowed {
			t = d.RetryAfter
		}
		cur = strconv.AppendQuote(cur, l.Name)
		cur = append(cur, ";r="...)
		cur = strconv.AppendInt(cur, int64(max(d.Remaining, 0)), 10)
		if t > 0 {
			cur = append(cur, ";t="...)
			cur = strconv.AppendInt(cur, int64((t+time.Second-1)/time.Second), 10)
		}
	}
	h["Ratelimit-Policy"] = []string{string(pol)}
	h["Ratelimit"] = []string{string(cur)}
}

// problem writes an application/problem+json response (RFC 9457).
func (m *Middleware) problem(w http.ResponseWriter, status int, typ, title, detail string, violated []string) {
	body := struct {
		Type     string   `json:"type"`
		Title    string   `json:"title"`
		Status   int      `json:"status"`
		Detail   string   `json:"detail,omitempty"`
		Violated []string `json:"violated-policies,omitempty"`
	}{typ, title, status, detail, violated}
	b, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(b)
}

// logFailure logs a store failure, at most once per second.
func (m *Middleware) logFailure(err error) {
	now := time.Now().UnixNano()
	last := m.logged.Load()
	if now-last < int64(time.Second) || !m.logged.CompareAndSwap(last, now) {
		return
	}
	policy := [...]string{"fail closed", "fail open", "local limiter"}[m.o.OnFailure]
	m.log.Warn("ratelimit: store failed", slog.String("policy", policy), slog.Any("error", err))
}
