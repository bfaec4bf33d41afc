package client

import (
	"context"
	"errors"
	"fmt"
	idemdriver "github.com/tenurekit/tenure/idempotency/driver"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/internal/serveapi"
	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/ratelimit/driver"
	"github.com/tenurekit/tenure/session"
	sessiondriver "github.com/tenurekit/tenure/session/driver"
)

func d(v time.Duration) serveapi.Duration { return serveapi.Duration(v) }

// ---- leases ----

var leaseErrs = mapping{unavailable: lease.ErrUnavailable, of: func(p serveapi.Problem) error {
	switch p.Type {
	case serveapi.TypeInvalid:
		return lease.ErrInvalid
	case serveapi.TypeNotHeld:
		return lease.ErrNotHeld
	case serveapi.TypeLost:
		return lease.ErrLost
	case serveapi.TypeStale:
		return &fence.StaleError{Fence: p.Fence, Current: p.Current}
	}
	return nil
}}

// leaseMapping is leaseErrs with the key, for a *lease.HeldError.
func leaseMapping(key string) mapping {
	return mapping{unavailable: lease.ErrUnavailable, of: func(p serveapi.Problem) error {
		if p.Type == serveapi.TypeHeld {
			return &lease.HeldError{Key: key, TTL: p.TTL.D(), Holder: p.Holder, Position: p.Position}
		}
		return leaseErrs.of(p)
	}}
}

// Leases returns the lease.Store view; it also implements lease.Lister.
func (c *Client) Leases() lease.Store { return leases{c} }

type leases struct{ c *Client }

// Lister is the list capability of the Leases view, Queuer its queue of
// waiters.
var (
	_ lease.Lister       = leases{}
	_ leasedriver.Queuer = leases{}
)

func (v leases) Acquire(ctx context.Context, key, token string, ttl time.Duration) (lease.Grant, error) {
	return v.AcquireHolder(ctx, key, token, ttl, "")
}

// AcquireHolder is Acquire with a holder description (leasedriver.HolderAcquirer):
// the server keeps it where its store does.
func (v leases) AcquireHolder(ctx context.Context, key, token string, ttl time.Duration, holder string) (lease.Grant, error) {
	if err := leasedriver.Validate(key, token, ttl); err != nil {
		return lease.Grant{}, err
	}
	if err := leasedriver.ValidateHolder(holder); err != nil {
		return lease.Grant{}, err
	}
	var g serveapi.LeaseGrant
	err := v.c.call(ctx, leaseMapping(key), http.MethodPost, "/v1/leases/acquire", nil,
		serveapi.AcquireLease{Key: key, Token: token, TTL: d(ttl), Holder: holder}, &g)
	if err != nil {
		return lease.Grant{}, err
	}
	return lease.Grant{Fence: g.Fence, TTL: g.TTL.D()}, nil
}

// AcquireQueued is AcquireHolder for a waiter that keeps its place in the
// key's queue of waiters on the server's store for stay
// (leasedriver.Queuer): one request, answered at once. A lease.Locker on
// the client's Leases view so serves its waiters in arrival order across
// every client of the server.
func (v leases) AcquireQueued(ctx context.Context, key, token string, ttl time.Duration, holder string, stay time.Duration) (lease.Grant, error) {
	if err := leasedriver.ValidateQueued(key, token, ttl, holder, stay); err != nil {
		return lease.Grant{}, err
	}
	var g serveapi.LeaseGrant
	err := v.c.call(ctx, leaseMapping(key), http.MethodPost, "/v1/leases/acquire", nil,
		serveapi.AcquireLease{Key: key, Token: token, TTL: d(ttl), Holder: holder, Stay: d(stay)}, &g)
	if err != nil {
		return lease.Grant{}, err
	}
	return lease.Grant{Fence: g.Fence, TTL: g.TTL.D()}, nil
}

// Leave gives token's place in key's queue up (leasedriver.Queuer).
func (v leases) Leave(ctx context.Context, key, token string) error {
	if err := leasedriver.ValidateLeave(key, token); err != nil {
		return err
	}
	return v.c.call(ctx, leaseMapping(key), http.MethodPost, "/v1/leases/leave", nil, serveapi.LeaseToken{Key: key, Token: token}, nil)
}

// AcquireWait is Acquire that waits up to wait (at most the server's
// max_wait) for a held key to be free, in one request (a long poll).
func (c *Client) AcquireWait(ctx context.Context, key, token string, ttl, wait time.Duration) (lease.Grant, error) {
	var g serveapi.LeaseGrant
	// A long poll holds its request: never in a batch.
	err := c.send(ctx, leaseMapping(key), http.MethodPost, "/v1/leases/acquire", nil,
		serveapi.AcquireLease{Key: key, Token: token, TTL: d(ttl), Wait: d(wait)}, &g)
	if err != nil {
		return lease.Grant{}, err
	}
	return lease.Grant{Fence: g.Fence, TTL: g.TTL.D()}, nil
}

func (v leases) Renew(ctx context.Context, key, token string, ttl time.Duration) (lease.Grant, error) {
	if err := leasedriver.Validate(key, token, ttl); err != nil {
		return lease.Grant{}, err
	}
	var g serveapi.LeaseGrant
	err := v.c.call(ctx, leaseMapping(key), http.MethodPost, "/v1/leases/renew", nil,
		serveapi.LeaseToken{Key: key, Token: token, TTL: d(ttl)}, &g)
	if err != nil {
		return lease.Grant{}, err
	}
	return lease.Grant{Fence: g.Fence, TTL: g.TTL.D()}, nil
}

func (v leases) Release(ctx context.Context, key, token string) error {
	if err := leasedriver.ValidateKey(key); err != nil {
		return err
	}
	if err := leasedriver.ValidateToken(token); err != nil {
		return err
	}
	return v.c.call(ctx, leaseMapping(key), http.MethodPost, "/v1/leases/release", nil, serveapi.LeaseToken{Key: key, Token: token}, nil)
}

func (v leases) Inspect(ctx context.Context, key string) (lease.Info, error) {
	if err := leasedriver.ValidateKey(key); err != nil {
		return lease.Info{}, err
	}
	var i serveapi.LeaseInfo
	if err := v.c.call(ctx, leaseMapping(key), http.MethodGet, "/v1/leases/inspect", url.Values{"key": {key}}, nil, &i); err != nil {
		return lease.Info{}, err
	}
	return lease.Info{Key: i.Key, Held: i.Held, Fence: i.Fence, TTL: i.TTL.D(), Holder: i.Holder}, nil
}

func (v leases) List(ctx context.Context, prefix, after string, limit int) ([]lease.Info, error) {
	if err := leasedriver.ValidateList(prefix, after, limit); err != nil {
		return nil, err
	}
	var l serveapi.LeaseList
	q := url.Values{"prefix": {prefix}, "after": {after}, "limit": {strconv.Itoa(limit)}}
	if err := v.c.call(ctx, leaseErrs, http.MethodGet, "/v1/leases", q, nil, &l); err != nil {
		return nil, err
	}
	out := make([]lease.Info, 0, len(l.Leases))
	for _, i := range l.Leases {
		out = append(out, lease.Info{Key: i.Key, Held: i.Held, Fence: i.Fence, TTL: i.TTL.D(), Holder: i.Holder})
	}
	return out, nil
}

// FencedWrite sets the server-kept value name to value if f is greater
// than every fence admitted for name before; otherwise the error wraps
// fence.ErrStale and nothing changed. It orders writers and is blind to
// time: a holder whose lease ended is still admitted until the next holder
// wrote. For read-modify-write use HolderWrite.
func (c *Client) FencedWrite(ctx context.Context, name string, f uint64, value []byte) error {
	if value == nil {
		value = []byte{}
	}
	return c.call(ctx, leaseErrs, http.MethodPost, "/v1/fenced/write", nil, serveapi.FencedWrite{Name: name, Fence: f, ValueBase64: value}, nil)
}

// HolderWrite sets the server-kept value name to value only while l holds
// its key: the server checks l's key, token and fence against the store,
// on the store's clock, in the same atomic step as the write, so a lease
// that ended is refused (an error wrapping lease.ErrNotHeld) even before
// the next holder wrote. A newer fence admitted for name gives an error
// wrapping fence.ErrStale. Either way nothing changed. It is the write for
// read-modify-write under a lease: read with FencedRead, compute, write
// with HolderWrite.
func (c *Client) HolderWrite(ctx context.Context, l *lease.Lease, name string, value []byte) error {
	if l == nil {
		return fmt.Errorf("%w: nil lease", lease.ErrInvalid)
	}
	if value == nil {
		value = []byte{}
	}
	in := serveapi.FencedHolderWrite{Name: name, Key: l.Key(), Token: l.Token().Reveal(), Fence: l.Fence(), ValueBase64: value}
	return c.call(ctx, leaseErrs, http.MethodPost, "/v1/fenced/holder-write", nil, in, nil)
}

// FencedRead returns the server-kept value name and the fence that wrote
// it (nil, 0 if never written).
func (c *Client) FencedRead(ctx context.Context, name string) ([]byte, uint64, error) {
	var v serveapi.FencedValue
	if err := c.call(ctx, leaseErrs, http.MethodGet, "/v1/fenced/read", url.Values{"name": {name}}, nil, &v); err != nil {
		return nil, 0, err
	}
	if v.Fence == 0 && len(v.ValueBase64) == 0 {
		return nil, 0, nil
	}
	return v.ValueBase64, v.Fence, nil
}

// ---- idempotency ----

func idemMapping(id idempotency.ID) mapping {
	return mapping{unavailable: idempotency.ErrUnavailable, of: func(p serveapi.Problem) error {
		switch p.Type {
		case serveapi.TypeInvalid:
			return idempotency.ErrInvalid
		case serveapi.TypeLost:
			return idempotency.ErrClaimLost
		case serveapi.TypeMismatch:
			return idempotency.ErrMismatch
		case serveapi.TypeInProgress:
			return &idempotency.InProgressError{Scope: id.Scope, Key: id.Key, RetryAfter: p.TTL.D()}
		}
		return nil
	}}
}

// Idempotency returns the idempotency.Store view.
func (c *Client) Idempotency() idempotency.Store { return idem{c} }

type idem struct{ c *Client }

var states = map[string]idemdriver.State{
	"claimed": idemdriver.Claimed, "completed": idemdriver.Completed, "in-progress": idemdriver.InProgress,
	"abandoned": idemdriver.Abandoned, "mismatch": idemdriver.Mismatch,
}

func outcomeIn(o *serveapi.IdemOutcome) idempotency.Outcome {
	if o == nil {
		return idempotency.Outcome{}
	}
	return idempotency.Outcome{Value: o.Value, Failed: o.Failed, Message: o.Message}
}

func (v idem) Begin(ctx context.Context, b idemdriver.Begin) (idemdriver.Begun, error) {
	if err := idemdriver.ValidateBegin(b); err != nil {
		return idemdriver.Begun{}, err
	}
	var out serveapi.IdemBegun
	err := v.c.call(ctx, idemMapping(b.ID), http.MethodPost, "/v1/idempotency/begin", nil, serveapi.IdemBegin{
		Scope: b.Scope, Key: b.Key, Fingerprint: b.Fingerprint, Token: b.Token.Reveal(),
		ClaimTTL: d(b.ClaimTTL), Retention: d(b.Retention), Takeover: b.Takeover,
	}, &out)
	// The server answers a mismatch and a live claim of another attempt
	// as problems; the store contract answers them as states.
	var inpr *idempotency.InProgressError
	switch {
	case errors.As(err, &inpr):
		return idemdriver.Begun{State: idemdriver.InProgress, TTL: inpr.RetryAfter}, nil
	case errors.Is(err, idempotency.ErrMismatch):
		return idemdriver.Begun{State: idemdriver.Mismatch}, nil
	case err != nil:
		return idemdriver.Begun{}, err
	}
	st, ok := states[out.State]
	if !ok {
		return idemdriver.Begun{}, &Error{Type: serveapi.TypeInternal, Status: http.StatusOK, Title: "malformed answer",
			Detail: "unknown state " + strconv.Quote(out.State), err: idempotency.ErrUnavailable}
	}
	return idemdriver.Begun{State: st, Fence: out.Fence, TTL: out.TTL.D(), Outcome: outcomeIn(out.Outcome)}, nil
}

func (v idem) Renew(ctx context.Context, id idempotency.ID, token string, f uint64, ttl time.Duration) error {
	if err := idemdriver.ValidateClaim(id, token, f); err != nil {
		return err
	}
	// The server would take a zero ttl as its default; the Store contract
	// refuses it.
	if err := idemdriver.ValidateClaimTTL(ttl); err != nil {
		return err
	}
	return v.c.call(ctx, idemMapping(id), http.MethodPost, "/v1/idempotency/renew", nil,
		serveapi.IdemClaim{Scope: id.Scope, Key: id.Key, Token: token, Fence: f, TTL: d(ttl)}, nil)
}

func (v idem) Complete(ctx context.Context, id idempotency.ID, token string, f uint64, out idempotency.Outcome, retention time.Duration) error {
	if err := idemdriver.ValidateClaim(id, token, f); err != nil {
		return err
	}
	if err := idemdriver.ValidateRetention(retention); err != nil {
		return err
	}
	return v.c.call(ctx, idemMapping(id), http.MethodPost, "/v1/idempotency/complete", nil,
		serveapi.IdemClaim{Scope: id.Scope, Key: id.Key, Token: token, Fence: f, Retention: d(retention),
			Outcome: &serveapi.IdemOutcome{Value: out.Value, Failed: out.Failed, Message: out.Message}}, nil)
}

func (v idem) Release(ctx context.Context, id idempotency.ID, token string) error {
	if err := idemdriver.ValidateID(id); err != nil {
		return err
	}
	if err := idemdriver.ValidateToken(token); err != nil {
		return err
	}
	return v.c.call(ctx, idemMapping(id), http.MethodPost, "/v1/idempotency/release", nil,
		serveapi.IdemClaim{Scope: id.Scope, Key: id.Key, Token: token}, nil)
}

func (v idem) Inspect(ctx context.Context, id idempotency.ID) (idempotency.Record, error) {
	if err := idemdriver.ValidateID(id); err != nil {
		return idempotency.Record{}, err
	}
	var r serveapi.IdemRecord
	if err := v.c.call(ctx, idemMapping(id), http.MethodGet, "/v1/idempotency/inspect", url.Values{"scope": {id.Scope}, "key": {id.Key}}, nil, &r); err != nil {
		return idempotency.Record{}, err
	}
	return idempotency.Record{ID: idempotency.ID{Scope: r.Scope, Key: r.Key}, Exists: r.Exists, Completed: r.Completed,
		Fingerprint: r.Fingerprint, Fence: r.Fence, ClaimTTL: r.ClaimTTL.D(), Expires: r.Expires.D(), Outcome: outcomeIn(r.Outcome)}, nil
}

// ---- rate limits ----

var rateErrs = mapping{unavailable: ratelimit.ErrUnavailable, of: func(p serveapi.Problem) error {
	switch p.Type {
	case serveapi.TypeInvalid:
		return ratelimit.ErrInvalid
	case serveapi.TypeLost:
		return ratelimit.ErrPermitLost
	}
	return nil
}}

// Limits returns the ratelimit.Store view.
func (c *Client) Limits() ratelimit.Store { return limits{c} }

type limits struct{ c *Client }

func stateOut(k driver.StateKey) *serveapi.StateKey {
	return &serveapi.StateKey{Group: k.Group, Name: k.Name, Kind: k.Kind, Key: k.Key}
}

func limitOut(l ratelimit.Limit) *serveapi.Limit {
	return &serveapi.Limit{Name: l.Name, Rate: l.Rate, Period: d(l.Period), Burst: l.Burst}
}

var algorithmNames = map[string]ratelimit.Algorithm{
	"gcra": ratelimit.GCRA, "fixed-window": ratelimit.FixedWindow, "sliding-log": ratelimit.SlidingLog, "sliding-window": ratelimit.SlidingWindow,
}

func (v limits) Decide(ctx context.Context, reqs []driver.Request, commit bool) ([]ratelimit.Decision, error) {
	if err := driver.ValidateRequests(reqs, commit); err != nil {
		return nil, err
	}
	in := serveapi.RateAllow{Peek: !commit, Requests: make([]serveapi.RateRequest, 0, len(reqs))}
	for _, r := range reqs {
		n := r.N
		in.Requests = append(in.Requests, serveapi.RateRequest{State: stateOut(r.Key), Algorithm: r.Algorithm.String(), Limit: limitOut(r.Limit), N: &n})
	}
	var out serveapi.RateDecisions
	if err := v.c.call(ctx, rateErrs, http.MethodPost, "/v1/rate/allow", nil, in, &out); err != nil {
		return nil, err
	}
	if len(out.Decisions) != len(reqs) {
		return nil, &Error{Type: serveapi.TypeInternal, Status: http.StatusOK, Title: "malformed answer",
			Detail: "the number of decisions does not match the requests", err: ratelimit.ErrUnavailable}
	}
	ds := make([]ratelimit.Decision, len(reqs))
	for i, o := range out.Decisions {
		ds[i] = ratelimit.Decision{Allowed: o.Allowed, Remaining: o.Remaining, RetryAfter: o.RetryAfter.D(), ResetAfter: o.ResetAfter.D(),
			Limit:     ratelimit.Limit{Name: o.Limit.Name, Rate: o.Limit.Rate, Period: o.Limit.Period.D(), Burst: o.Limit.Burst},
			Algorithm: algorithmNames[o.Algorithm], At: o.At}
	}
	return ds, nil
}

func (v limits) Reset(ctx context.Context, keys []driver.StateKey) error {
	if err := driver.ValidateStateKeys(keys); err != nil {
		return err
	}
	in := serveapi.RateReset{Requests: make([]serveapi.RateRequest, 0, len(keys))}
	for _, k := range keys {
		in.Requests = append(in.Requests, serveapi.RateRequest{State: stateOut(k)})
	}
	return v.c.call(ctx, rateErrs, http.MethodPost, "/v1/rate/reset", nil, in, nil)
}

func permitIn(p serveapi.PermitGrant) driver.PermitGrant {
	return driver.PermitGrant{Acquired: p.Acquired, Fence: p.Fence, InUse: p.InUse, RetryAfter: p.RetryAfter.D(), TTL: p.TTL.D(), At: p.At}
}

func (v limits) AcquirePermit(ctx context.Context, key driver.StateKey, id string, permits int, ttl time.Duration) (driver.PermitGrant, error) {
	var out serveapi.PermitGrant
	err := v.c.call(ctx, rateErrs, http.MethodPost, "/v1/permits/acquire", nil,
		serveapi.Permit{State: stateOut(key), ID: id, Permits: permits, TTL: d(ttl)}, &out)
	if err != nil {
		return driver.PermitGrant{}, err
	}
	return permitIn(out), nil
}

func (v limits) RenewPermit(ctx context.Context, key driver.StateKey, id string, ttl time.Duration) (driver.PermitGrant, error) {
	var out serveapi.PermitGrant
	err := v.c.call(ctx, rateErrs, http.MethodPost, "/v1/permits/renew", nil,
		serveapi.Permit{State: stateOut(key), ID: id, TTL: d(ttl)}, &out)
	if err != nil {
		return driver.PermitGrant{}, err
	}
	return permitIn(out), nil
}

func (v limits) ReleasePermit(ctx context.Context, key driver.StateKey, id string) error {
	return v.c.call(ctx, rateErrs, http.MethodPost, "/v1/permits/release", nil, serveapi.Permit{State: stateOut(key), ID: id}, nil)
}

// ---- sessions ----

var sessionErrs = mapping{unavailable: session.ErrUnavailable, of: func(p serveapi.Problem) error {
	switch p.Type {
	case serveapi.TypeInvalid:
		return session.ErrInvalid
	case serveapi.TypeNotFound:
		return session.ErrNotFound
	case serveapi.TypeConflict:
		return session.ErrConflict
	}
	return nil
}}

// Sessions returns the session.Store view.
func (c *Client) Sessions() session.Store { return sessions{c} }

type sessions struct{ c *Client }

func recordIn(r serveapi.SessionRecord) session.Record {
	return session.Record{ID: session.ID(r.ID), UserID: r.UserID, Data: r.Data, Version: r.Version,
		Created: r.Created, IdleUntil: r.IdleUntil, AbsoluteUntil: r.AbsoluteUntil}
}

func (v sessions) Create(ctx context.Context, rec session.Record, idle, absolute time.Duration) (session.Record, error) {
	if err := sessiondriver.ValidateRecord(rec, idle, absolute); err != nil {
		return session.Record{}, err
	}
	var out serveapi.SessionRecord
	err := v.c.call(ctx, sessionErrs, http.MethodPost, "/v1/sessions", nil, serveapi.SessionCreate{
		ID: string(rec.ID), UserID: rec.UserID, Data: rec.Data, Idle: d(idle), Absolute: d(absolute)}, &out)
	if err != nil {
		return session.Record{}, err
	}
	return recordIn(out), nil
}

func (v sessions) Load(ctx context.Context, id session.ID, idle time.Duration) (session.Record, error) {
	if err := id.Validate(); err != nil {
		return session.Record{}, err
	}
	var out serveapi.SessionRecord
	if err := v.c.call(ctx, sessionErrs, http.MethodPost, "/v1/sessions/load", nil, serveapi.SessionRef{ID: string(id), Idle: d(idle)}, &out); err != nil {
		return session.Record{}, err
	}
	return recordIn(out), nil
}

func (v sessions) Touch(ctx context.Context, id session.ID, version uint64, idle time.Duration) (time.Time, error) {
	if err := id.Validate(); err != nil {
		return time.Time{}, err
	}
	var out serveapi.SessionTouched
	err := v.c.call(ctx, sessionErrs, http.MethodPost, "/v1/sessions/touch", nil, serveapi.SessionRef{ID: string(id), Version: version, Idle: d(idle)}, &out)
	return out.IdleUntil, err
}

func (v sessions) Save(ctx context.Context, id session.ID, version uint64, data []byte, idle time.Duration) (session.Record, error) {
	if err := id.Validate(); err != nil {
		return session.Record{}, err
	}
	var out serveapi.SessionRecord
	err := v.c.call(ctx, sessionErrs, http.MethodPost, "/v1/sessions/save", nil,
		serveapi.SessionRef{ID: string(id), Version: version, Data: data, Idle: d(idle)}, &out)
	if err != nil {
		return session.Record{}, err
	}
	return recordIn(out), nil
}

func (v sessions) Rotate(ctx context.Context, old, newID session.ID, version uint64, data []byte, idle time.Duration) (session.Record, error) {
	if err := old.Validate(); err != nil {
		return session.Record{}, err
	}
	var out serveapi.SessionRecord
	err := v.c.call(ctx, sessionErrs, http.MethodPost, "/v1/sessions/rotate", nil,
		serveapi.SessionRef{ID: string(old), NewID: string(newID), Version: version, Data: data, Idle: d(idle)}, &out)
	if err != nil {
		return session.Record{}, err
	}
	return recordIn(out), nil
}

func (v sessions) Delete(ctx context.Context, id session.ID) error {
	if err := id.Validate(); err != nil {
		return err
	}
	return v.c.call(ctx, sessionErrs, http.MethodPost, "/v1/sessions/revoke", nil, serveapi.SessionRef{ID: string(id)}, nil)
}

func (v sessions) DeleteUser(ctx context.Context, userID string) (int, error) {
	if err := sessiondriver.ValidateUserID(userID); err != nil {
		return 0, err
	}
	var out serveapi.Revoked
	err := v.c.call(ctx, sessionErrs, http.MethodPost, "/v1/sessions/revoke-user", nil, serveapi.UserRef{UserID: userID}, &out)
	return out.Removed, err
}

func (v sessions) List(ctx context.Context, userID string) ([]session.Record, error) {
	if err := sessiondriver.ValidateUserID(userID); err != nil {
		return nil, err
	}
	var out serveapi.SessionList
	if err := v.c.call(ctx, sessionErrs, http.MethodGet, "/v1/sessions", url.Values{"user_id": {userID}}, nil, &out); err != nil {
		return nil, err
	}
	recs := make([]session.Record, 0, len(out.Sessions))
	for _, r := range out.Sessions {
		recs = append(recs, recordIn(r))
	}
	return recs, nil
}

// SessionWrite sets a value of the user of the session of tok (a balance,
// a role) if that session is live and, when version is not 0, still at
// version when the write lands: the server checks the session at the
// write, in one atomic step, so a write after a logout changes nothing. A
// session that ended gets an error wrapping session.ErrNotFound, one at
// another version session.ErrConflict; bad input wraps session.ErrInvalid
// and a request that got no answer session.ErrUnavailable (the write may
// have landed). The token travels only in the request's body.
func (c *Client) SessionWrite(ctx context.Context, tok session.Token, version uint64, name string, value []byte) error {
	if err := serveapi.ValidateSessionName(name); err != nil {
		return err
	}
	if len(value) > serveapi.MaxSessionValueLen {
		return fmt.Errorf("%w: value is %d bytes, larger than %d", session.ErrInvalid, len(value), serveapi.MaxSessionValueLen)
	}
	if tok.IsZero() {
		return fmt.Errorf("%w: no session token", session.ErrInvalid)
	}
	if value == nil {
		value = []byte{}
	}
	return c.call(ctx, sessionErrs, http.MethodPost, "/v1/sessions/write", nil,
		serveapi.SessionValueWrite{Token: tok.Reveal(), Version: version, Name: name, ValueBase64: value}, nil)
}

// SessionRead returns the value name of userID that SessionWrite keeps,
// and whether it was ever written.
func (c *Client) SessionRead(ctx context.Context, userID, name string) ([]byte, bool, error) {
	if err := serveapi.ValidateSessionValue(userID, name, nil); err != nil {
		return nil, false, err
	}
	var v serveapi.SessionValue
	if err := c.call(ctx, sessionErrs, http.MethodGet, "/v1/sessions/value", url.Values{"user_id": {userID}, "name": {name}}, nil, &v); err != nil {
		return nil, false, err
	}
	if !v.Present {
		return nil, false, nil
	}
	if v.ValueBase64 == nil {
		v.ValueBase64 = []byte{}
	}
	return v.ValueBase64, true, nil
}
