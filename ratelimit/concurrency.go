package ratelimit

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/tenurekit/tenure/internal/tenancy"
	"github.com/tenurekit/tenure/ratelimit/driver"
)

// ConcurrencyLimit is a limit on how many holders may work on a key at
// once.
type ConcurrencyLimit struct {
	// Name separates this limit's permits from other limits on the same
	// keys (same rules as Limit.Name). Default "concurrency-<Permits>".
	Name string
	// Permits is the number of holders allowed at once: 1 to MaxPermits.
	Permits int
	// TTL is a permit's lease time: a permit that is neither renewed nor
	// released within TTL expires, so a holder that died frees its permit
	// by itself. MinPermitTTL to MaxPermitTTL, whole microseconds. Default
	// 30s. Work that may run longer keeps its permit alive (see
	// Concurrency.Do).
	TTL time.Duration
}

// DefaultPermitTTL is ConcurrencyLimit.TTL when it is zero.
const DefaultPermitTTL = 30 * time.Second

// Concurrency limits how many holders work on a key at once. Permits are
// leases kept by the store: they expire if their holder dies, can be
// renewed, and are released explicitly. Each permit carries a fence,
// strictly greater than the fences of the permits granted before it on the
// key. It is safe for concurrent use.
type Concurrency struct {
	s   Store // timed when instrumentation is on
	tel *telemetry
	lim ConcurrencyLimit
	now func() time.Time // client clock: validity only, never decisions
}

// NewConcurrency returns a concurrency limiter for l on s, with options o
// (nil: the defaults, the global OpenTelemetry providers). The limit is
// validated here; errors wrap ErrInvalid (a nil store, also a nil pointer
// of a store type, is one). A permit request counts in
// tenure.ratelimit.decisions: allowed when granted, denied when every
// permit is held.
func NewConcurrency(s Store, l ConcurrencyLimit, o *Options) (*Concurrency, error) {
	if isNil(s) {
		return nil, fmt.Errorf("%w: nil store", ErrInvalid)
	}
	if l.Permits < 1 || l.Permits > MaxPermits {
		return nil, fmt.Errorf("%w: permits %d out of range [1, %d]", ErrInvalid, l.Permits, MaxPermits)
	}
	if l.TTL == 0 {
		l.TTL = DefaultPermitTTL
	}
	if l.TTL < MinPermitTTL || l.TTL > MaxPermitTTL || l.TTL%time.Microsecond != 0 {
		return nil, fmt.Errorf("%w: permit ttl %v out of range [%v, %v] or not whole microseconds", ErrInvalid, l.TTL, MinPermitTTL, MaxPermitTTL)
	}
	if l.Name == "" {
		l.Name = "concurrency-" + strconv.Itoa(l.Permits)
	}
	if err := driver.ValidateName("limit name", l.Name); err != nil {
		return nil, err
	}
	tel := newTelemetry(s, l.Name, o)
	st, _ := timed(s, tel)
	return &Concurrency{s: st, tel: tel, lim: l, now: time.Now}, nil
}

// Limit returns the limit, with its defaults filled in.
func (c *Concurrency) Limit() ConcurrencyLimit { return c.lim }

func (c *Concurrency) stateKey(key string) driver.StateKey {
	return driver.StateKey{Name: c.lim.Name, Kind: "p", Key: key}
}

// newPermitID returns a fresh permit id (128 random bits, base32).
func newPermitID() string { return crand.Text() }

// TryAcquire takes a permit on key if one is free, and fails fast
// otherwise with a *LimitedError (errors.Is(err, ErrLimited)) that says when
// the soonest held permit expires.
func (c *Concurrency) TryAcquire(ctx context.Context, key string) (*Permit, error) {
	ctx, sp := c.tel.start(ctx, "tenure.ratelimit.acquire", key)
	p, err := c.tryAcquire(ctx, key)
	c.tel.decided(ctx, sp, err == nil, err)
	return p, err
}

func (c *Concurrency) tryAcquire(ctx context.Context, key string) (*Permit, error) {
	if err := driver.ValidateKey(key); err != nil {
		return nil, err
	}
	return c.try(ctx, key, newPermitID())
}

func (c *Concurrency) try(ctx context.Context, key, id string) (*Permit, error) {
	sent := c.now()
	g, err := c.s.AcquirePermit(ctx, c.stateKey(key), id, c.lim.Permits, c.lim.TTL)
	if err != nil {
		return nil, err
	}
	if !g.Acquired {
		return nil, &LimitedError{Key: key, Permits: c.lim.Permits, InUse: g.InUse, RetryAfter: g.RetryAfter}
	}
	return c.newPermit(key, id, g.Fence, sent, g.TTL), nil
}

// Acquire takes a permit on key, waiting until one is free or ctx ends.
// Waiters poll with jittered backoff, never sleeping past the moment the
// soonest held permit expires. It keeps one permit id across attempts, so
// an attempt whose reply was lost is reconciled by the next one. When ctx
// ends first, the error wraps ctx's error (and the last *LimitedError).
func (c *Concurrency) Acquire(ctx context.Context, key string) (*Permit, error) {
	ctx, sp := c.tel.start(ctx, "tenure.ratelimit.acquire", key)
	p, err := c.acquire(ctx, key)
	c.tel.decided(ctx, sp, err == nil, err)
	return p, err
}

func (c *Concurrency) acquire(ctx context.Context, key string) (*Permit, error) {
	if err := driver.ValidateKey(key); err != nil {
		return nil, err
	}
	id := newPermitID()
	backoff := 2 * time.Millisecond
	var limited error // the last refusal, reported when ctx ends
	fail := func(err error) error {
		if limited != nil && !errors.Is(err, ErrLimited) {
			return errors.Join(ctx.Err(), limited, err)
		}
		return errors.Join(ctx.Err(), err)
	}
	for {
		p, err := c.try(ctx, key, id)
		if err == nil {
			return p, nil
		}
		var le *LimitedError
		switch {
		case errors.As(err, &le):
			limited = le
		case ctx.Err() != nil:
			// ctx ended during the attempt (the store answered with
			// ctx's error): the error still wraps the last refusal.
			return nil, fail(err)
		case !isUnavailable(err):
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, fail(err)
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		if le != nil && le.RetryAfter > 0 {
			wait = min(wait, le.RetryAfter)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fail(err)
		case <-t.C:
		}
		backoff = min(backoff*2, 250*time.Millisecond)
	}
}

// Do takes a permit on key (waiting as Acquire does), runs fn while
// keeping the permit alive (renewing it every TTL/3), and releases it
// afterwards, also when ctx was cancelled. fn's context ends when the
// permit is lost or its validity runs out; Do then returns an error
// wrapping ErrPermitLost unless fn returned one. When fn panics (or calls
// runtime.Goexit), Do stops renewing and releases the permit before the
// panic goes on.
func (c *Concurrency) Do(ctx context.Context, key string, fn func(ctx context.Context) error) error {
	p, err := c.Acquire(ctx, key)
	if err != nil {
		return err
	}
	// fn's context ends the moment the permit is lost or its validity
	// runs out.
	ka := tenancy.NewGroup(ctx, nil, "ratelimit: permit")
	ka.Add(p.g)
	fctx := ka.Context()
	var rerr error
	finish := func() {
		ka.Stop()
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer rcancel()
		rerr = p.Release(rctx)
	}
	returned := false
	defer func() {
		if !returned {
			// fn panicked or called runtime.Goexit: the permit must not stay
			// renewed. The panic continues once this returns.
			finish()
		}
	}()
	ferr := fn(fctx)
	returned = true
	finish()
	if ferr != nil {
		return ferr
	}
	if errors.Is(rerr, ErrPermitLost) || p.lostErr() != nil {
		return fmt.Errorf("%w: %q: the permit ended before fn returned", ErrPermitLost, key)
	}
	return rerr
}

// Permit is a held concurrency permit: a lease on one of the limit's
// places for a key, valid on the client's monotonic clock from when its
// request was sent for the granted TTL minus a margin (1% of the TTL plus
// 2ms, at most a quarter of the TTL), so that its holder stops before the
// store expires it.
type Permit struct {
	c   *Concurrency
	key string
	g   *tenancy.Grant // holds the id, which releases the permit: never printed
}

// errReleased is the error of a permit its holder released.
var errReleased = fmt.Errorf("%w: released", ErrPermitLost)

// newPermit returns the permit id on key whose request was sent at sent and
// granted for ttl; its validity timer starts at once.
func (c *Concurrency) newPermit(key, id string, fence uint64, sent time.Time, ttl time.Duration) *Permit {
	p := &Permit{c: c, key: key}
	p.g = tenancy.New(tenancy.Config{
		Token: id, Fence: fence, TTL: c.lim.TTL, Margin: tenancy.DefaultMargin,
		Renew: func(ctx context.Context) (time.Duration, error) {
			g, err := c.s.RenewPermit(ctx, c.stateKey(key), id, c.lim.TTL)
			return g.TTL, err
		},
		Lost: func(err error) error {
			if errors.Is(err, ErrPermitLost) {
				return err
			}
			return nil
		},
		Expired: fmt.Errorf("%w: validity ran out", ErrPermitLost),
	}, sent, ttl)
	return p
}

// Key returns the key the permit is for.
func (p *Permit) Key() string { return p.key }

// Fence returns the permit's fencing token.
func (p *Permit) Fence() uint64 { return p.g.Fence() }

// ValidUntil is the time, on this process's monotonic clock, until which
// the permit is certainly still held (if it was not released).
func (p *Permit) ValidUntil() time.Time { return p.g.ValidUntil() }

// Done is closed when the permit is released, lost, or its validity runs
// out.
func (p *Permit) Done() <-chan struct{} { return p.g.Done() }

// String describes the permit without its id (which can release it).
func (p *Permit) String() string {
	return fmt.Sprintf("permit{key=%q fence=%d id=<redacted>}", p.key, p.g.Fence())
}

// LogValue redacts the permit's id in structured logs.
func (p *Permit) LogValue() slog.Value {
	return slog.GroupValue(slog.String("key", p.key), slog.Uint64("fence", p.g.Fence()))
}

// lostErr returns the permit's error if it was lost or its validity ran
// out, else nil.
func (p *Permit) lostErr() error {
	if p.g.Lost() {
		return p.g.Err()
	}
	return nil
}

// Renew extends the permit to a full TTL from now (store clock), and its
// validity to the TTL from when the renewal was sent. It fails with
// ErrPermitLost if the permit expired or was released.
func (p *Permit) Renew(ctx context.Context) error { return p.g.Renew(ctx) }

// Release frees the permit. It fails with ErrPermitLost if the permit had
// expired (another holder may have taken its place meanwhile).
func (p *Permit) Release(ctx context.Context) error {
	err := p.c.s.ReleasePermit(ctx, p.c.stateKey(p.key), p.g.Token())
	if err == nil || errors.Is(err, ErrPermitLost) {
		p.g.End(errReleased)
	}
	return err
}
