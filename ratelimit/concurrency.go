package ratelimit

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/tenurekit/tenure/internal/secret"
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

// NewConcurrency returns a concurrency limiter for l on s. The limit is
// validated here; errors wrap ErrInvalid (a nil store, also a nil pointer
// of a store type, is one).
func NewConcurrency(s Store, l ConcurrencyLimit) (*Concurrency, error) {
	return NewConcurrencyWithOptions(s, l, nil)
}

// NewConcurrencyWithOptions is NewConcurrency with instrumentation options
// (nil: the defaults, the global OpenTelemetry providers). A permit
// request counts in tenure.ratelimit.decisions: allowed when granted,
// denied when every permit is held.
func NewConcurrencyWithOptions(s Store, l ConcurrencyLimit, o *Options) (*Concurrency, error) {
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
	p := &Permit{c: c, key: key, id: secret.New(id), fence: g.Fence, done: make(chan struct{})}
	p.validUntil = p.valid(sent, g.TTL)
	return p, nil
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
		if errors.As(err, &le) {
			limited = le
		} else if !isUnavailable(err) {
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
	fctx, cancel := context.WithCancel(ctx)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { p.keepAlive(fctx, stop, cancel) })
	var rerr error
	finish := func() {
		close(stop)
		wg.Wait()
		cancel()
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
// places for a key.
type Permit struct {
	c     *Concurrency
	key   string
	id    secret.Text // releases the permit: never printed
	fence uint64

	mu         sync.Mutex
	validUntil time.Time
	lost       error
	done       chan struct{}
	closed     bool
}

// valid computes the client-side validity of a grant for ttl whose
// request was sent at sent: sent + 9/10 of ttl on the monotonic clock, so
// that the holder stops before the store expires the permit.
func (p *Permit) valid(sent time.Time, ttl time.Duration) time.Time {
	return sent.Add(ttl - ttl/10)
}

// Key returns the key the permit is for.
func (p *Permit) Key() string { return p.key }

// Fence returns the permit's fencing token.
func (p *Permit) Fence() uint64 { return p.fence }

// ValidUntil is the time, on this process's monotonic clock, until which
// the permit is certainly still held (if it was not released).
func (p *Permit) ValidUntil() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.validUntil
}

// Done is closed when the permit is released or lost.
func (p *Permit) Done() <-chan struct{} { return p.done }

// String describes the permit without its id (which can release it).
func (p *Permit) String() string {
	return fmt.Sprintf("permit{key=%q fence=%d id=<redacted>}", p.key, p.fence)
}

// LogValue redacts the permit's id in structured logs.
func (p *Permit) LogValue() slog.Value {
	return slog.GroupValue(slog.String("key", p.key), slog.Uint64("fence", p.fence))
}

func (p *Permit) end(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil && p.lost == nil {
		p.lost = err
	}
	if !p.closed {
		p.closed = true
		close(p.done)
	}
}

func (p *Permit) lostErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lost
}

// Renew extends the permit to a full TTL from now (store clock). It fails
// with ErrPermitLost if the permit expired or was released.
func (p *Permit) Renew(ctx context.Context) error {
	sent := p.c.now()
	g, err := p.c.s.RenewPermit(ctx, p.c.stateKey(p.key), p.id.Reveal(), p.c.lim.TTL)
	if errors.Is(err, ErrPermitLost) {
		p.end(err)
		return err
	}
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.validUntil = p.valid(sent, g.TTL)
	p.mu.Unlock()
	return nil
}

// Release frees the permit. It fails with ErrPermitLost if the permit had
// expired (another holder may have taken its place meanwhile).
func (p *Permit) Release(ctx context.Context) error {
	err := p.c.s.ReleasePermit(ctx, p.c.stateKey(p.key), p.id.Reveal())
	if err == nil || errors.Is(err, ErrPermitLost) {
		p.end(nil)
	}
	return err
}

// keepAlive renews p every TTL/3 until stop is closed, and cancels fn's
// context when the permit is lost or its validity runs out.
func (p *Permit) keepAlive(ctx context.Context, stop <-chan struct{}, cancel context.CancelFunc) {
	every := p.c.lim.TTL / 3
	for {
		left := time.Until(p.ValidUntil())
		if left <= 0 {
			p.end(fmt.Errorf("%w: validity ran out", ErrPermitLost))
			cancel()
			return
		}
		t := time.NewTimer(min(every, left))
		select {
		case <-stop:
			t.Stop()
			return
		case <-p.done:
			t.Stop()
			cancel()
			return
		case <-t.C:
		}
		if time.Until(p.ValidUntil()) > 2*every {
			continue
		}
		rctx, rcancel := context.WithDeadline(context.WithoutCancel(ctx), p.ValidUntil())
		err := p.Renew(rctx)
		rcancel()
		if errors.Is(err, ErrPermitLost) {
			cancel()
			return
		}
	}
}
