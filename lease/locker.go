package lease

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/tenurekit/tenure/internal/tenancy"
	"github.com/tenurekit/tenure/lease/driver"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Options configure a Locker. The zero value (or nil) means the defaults
// documented on each field.
type Options struct {
	// DriftFactor is the share of a grant's TTL subtracted from the client's
	// validity to allow for clock rate differences between client and store.
	// It must be in [0, 0.5); default 0.01.
	DriftFactor float64
	// Margin is a fixed time subtracted from the client's validity on top of
	// DriftFactor, so that Done closes before the store expires the lease;
	// at most a quarter of the TTL is subtracted. Default 2ms; negative is
	// an error.
	Margin time.Duration
	// RetryMin and RetryMax bound the jittered exponential backoff of
	// Acquire while another holder has the key, on a store that cannot
	// wake waiters (driver.Waker). On one that can, a waiter tries again
	// when woken, when the holder's remaining TTL has passed, and at the
	// latest after RetryMax. A waiter never sleeps past the holder's
	// remaining TTL. Defaults 5ms and 500ms.
	RetryMin, RetryMax time.Duration
	// Unfair turns the store's queue of waiters off (driver.Queuer): on a
	// store that has one, Acquire by default keeps a place in the key's
	// queue, so waiters are served in arrival order and a newcomer never
	// overtakes one that waits (a waiter whose context ends leaves the
	// queue; one that crashed loses its place after 3×RetryMax). Unfair
	// waiters race each other for the key when it is freed: more hand-offs
	// per second at best, none promised to a long waiter. Unfair waiters
	// still never overtake fair ones. Default false.
	Unfair bool
	// Attempts is how many times a request whose outcome is unknown
	// (ErrUnavailable) is sent again with the same token before giving up.
	// Default 3.
	Attempts int
	// ReleaseTimeout bounds every release: Lease.Release (which retries a
	// request whose outcome is unknown at most this long, and runs this
	// long when its context has ended already), Do's release, and the
	// clean-up of an acquire whose outcome is unknown. Default 5s.
	ReleaseTimeout time.Duration
	// Logger receives debug and warning records (a lost lease is a
	// warning). Tokens are never logged. Default: discard.
	Logger *slog.Logger
	// MeterProvider supplies the Locker's instruments: tenure.lease.acquires,
	// tenure.lease.lost and tenure.store.duration (see
	// docs/observability.md). Default: the global provider
	// (otel.GetMeterProvider), so a service that installed an OpenTelemetry
	// SDK gets them without code. Instrumentation never changes a result.
	MeterProvider metric.MeterProvider
	// TracerProvider supplies the spans tenure.lease.acquire and
	// tenure.lease.do, and a span per store call under a recording span.
	// Default: the global provider (otel.GetTracerProvider). When both
	// providers are the OpenTelemetry no-op providers, instrumentation is
	// off entirely.
	TracerProvider trace.TracerProvider
	// TraceKeys adds the lease key to spans (never to metrics). Default
	// false: keys stay out of telemetry.
	TraceKeys bool
	// Holder describes this holder (node, purpose) to operators: stores
	// that keep it (every store tenure ships) store it with each grant
	// and report it in Info.Holder and HeldError.Holder. At most
	// MaxHolderLen bytes of printable UTF-8 (no control characters); it
	// must not contain secrets. Default DefaultHolder() (host name and
	// process ID); "-" gives none.
	Holder string
}

// Locker hands out fenced leases from a Store. It is safe for concurrent use.
type Locker struct {
	store Store // as given
	st    Store // store, timed when instrumentation is on
	o     Options
	log   *slog.Logger
	tel   *telemetry    // nil when off
	queue driver.Queuer // st's queue of waiters; nil without one or when Unfair
	// handover is st's hand-over to a watching waiter; nil without one
	// or without queue.
	handover driver.Handover
	waker    driver.Waker // store's wake-ups; nil without them
}

// New returns a Locker on s. o may be nil for the defaults. A nil store or
// an option out of range (a negative duration or count, a DriftFactor that
// is not a number in [0, 0.5)) is an error wrapping ErrInvalid.
func New(s Store, o *Options) (*Locker, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalid)
	}
	l := &Locker{store: s}
	if o != nil {
		l.o = *o
	}
	if err := l.o.validate(); err != nil {
		return nil, err
	}
	if l.o.DriftFactor == 0 {
		l.o.DriftFactor = 0.01
	}
	if l.o.Margin == 0 {
		l.o.Margin = 2 * time.Millisecond
	}
	if l.o.RetryMin == 0 {
		l.o.RetryMin = 5 * time.Millisecond
	}
	if l.o.RetryMax == 0 {
		l.o.RetryMax = max(500*time.Millisecond, l.o.RetryMin)
	}
	if l.o.Attempts == 0 {
		l.o.Attempts = 3
	}
	if l.o.ReleaseTimeout == 0 {
		l.o.ReleaseTimeout = 5 * time.Second
	}
	switch l.o.Holder {
	case "":
		l.o.Holder = DefaultHolder()
	case "-":
		l.o.Holder = ""
	}
	l.log = l.o.Logger
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	l.tel = newTelemetry(s, &l.o)
	l.st = newTimedStore(s, l.tel)
	if _, ok := s.(driver.Queuer); ok && !l.o.Unfair {
		l.queue = l.st.(driver.Queuer)
		if _, ok := s.(driver.Handover); ok {
			l.handover = l.st.(driver.Handover)
		}
	}
	l.waker, _ = s.(driver.Waker)
	return l, nil
}

// validate refuses option values out of range; zero means the default.
func (o *Options) validate() error {
	switch {
	case math.IsNaN(o.DriftFactor) || o.DriftFactor < 0 || o.DriftFactor >= 0.5:
		return fmt.Errorf("%w: DriftFactor %v must be in [0, 0.5)", ErrInvalid, o.DriftFactor)
	case o.Margin < 0:
		return fmt.Errorf("%w: negative Margin %v", ErrInvalid, o.Margin)
	case o.RetryMin < 0 || o.RetryMax < 0:
		return fmt.Errorf("%w: negative RetryMin or RetryMax", ErrInvalid)
	case o.RetryMax != 0 && o.RetryMax < o.RetryMin:
		return fmt.Errorf("%w: RetryMax %v is below RetryMin %v", ErrInvalid, o.RetryMax, o.RetryMin)
	case o.Attempts < 0:
		return fmt.Errorf("%w: negative Attempts %d", ErrInvalid, o.Attempts)
	case o.ReleaseTimeout < 0:
		return fmt.Errorf("%w: negative ReleaseTimeout %v", ErrInvalid, o.ReleaseTimeout)
	}
	return driver.ValidateHolder(o.Holder)
}

// Holder returns the holder description the Locker gives with its grants
// ("" for none).
func (lk *Locker) Holder() string { return lk.o.Holder }

// Store returns the store the Locker was made with.
func (lk *Locker) Store() Store { return lk.store }

// NewToken returns a fresh random token of 128 bits, as the Locker uses for
// every acquisition.
func NewToken() string { return crand.Text() }

// TryAcquire tries once to take key for ttl. If another holder has it, the
// error is a *HeldError (errors.Is(err, ErrHeld)) carrying the holder's
// remaining time.
//
// A request whose outcome is unknown (the store did not answer) is sent
// again with the same token, which the store answers with the same grant if
// the first one applied. If the outcome stays unknown, or ctx ends while a
// request is in flight, TryAcquire releases the token in the background
// (bounded by Options.ReleaseTimeout) so no lock is left behind for a whole
// TTL, and returns the error.
func (lk *Locker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*Lease, error) {
	ctx, sp := lk.tel.start(ctx, "tenure.lease.acquire", key)
	l, err := lk.tryAcquire(ctx, key, ttl)
	lk.tel.acquired(ctx, sp, err)
	return l, err
}

// tryAcquire is TryAcquire without telemetry.
func (lk *Locker) tryAcquire(ctx context.Context, key string, ttl time.Duration) (*Lease, error) {
	if err := driver.ValidateKey(key); err != nil {
		return nil, err
	}
	if err := driver.ValidateTTL(ttl); err != nil {
		return nil, err
	}
	token := NewToken()
	for attempt := 1; ; attempt++ {
		sent := time.Now()
		g, err := driver.AcquireAs(ctx, lk.st, key, token, ttl, lk.o.Holder)
		if err == nil {
			return lk.newLease(key, token, ttl, g, sent), nil
		}
		if errors.Is(err, ErrHeld) || errors.Is(err, ErrInvalid) {
			return nil, err
		}
		// The request may have been applied.
		if attempt >= lk.o.Attempts || ctx.Err() != nil || !errors.Is(err, ErrUnavailable) {
			lk.cleanup(ctx, key, token)
			return nil, err
		}
		lk.log.DebugContext(ctx, "lease: acquire outcome unknown, retrying with the same token",
			"key", key, "attempt", attempt, "err", err)
		if !sleep(ctx, lk.backoff(attempt)) {
			lk.cleanup(ctx, key, token)
			return nil, errors.Join(ctx.Err(), err)
		}
	}
}

// Acquire takes key for ttl, waiting while another holder has it until ctx
// ends. Waiting time is the ctx deadline; lease time is ttl. On a store
// with a queue of waiters (driver.Queuer) the waiter keeps a place in it
// and is served in arrival order (see Options.Unfair); on a store that
// wakes waiters (driver.Waker) it tries again as soon as the key is
// released. Otherwise, and as the fallback for a missed wake-up, it backs
// off with jitter and never sleeps past the holder's remaining TTL. When
// ctx ends first, the error wraps both ctx.Err() and the last ErrHeld, and
// the waiter's place is given up. With a ctx that has ended already,
// Acquire returns ctx.Err() wrapped and sends nothing to the store.
func (lk *Locker) Acquire(ctx context.Context, key string, ttl time.Duration) (*Lease, error) {
	ctx, sp := lk.tel.start(ctx, "tenure.lease.acquire", key)
	l, err := lk.acquire(ctx, key, ttl)
	lk.tel.acquired(ctx, sp, err)
	return l, err
}

// acquire is Acquire without telemetry.
func (lk *Locker) acquire(ctx context.Context, key string, ttl time.Duration) (*Lease, error) {
	if err := driver.ValidateKey(key); err != nil {
		return nil, err
	}
	if err := driver.ValidateTTL(ttl); err != nil {
		return nil, err
	}
	// A context that ended before the first attempt sends nothing: there
	// is no place to give up and no grant to release afterwards.
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lease: acquire %q: %w", key, err)
	}
	// A queued waiter keeps one token from its first attempt to its
	// grant, and is woken only by the wake-ups that name it (or none);
	// an unqueued one takes every wake-up.
	var token, me string
	if lk.queue != nil {
		token = NewToken()
		me = driver.WaiterID(token)
	}
	var wake <-chan string
	if lk.waker != nil {
		if ch, stop, err := lk.waker.Watch(ctx, key, me); err == nil {
			wake = ch
			defer stop()
		} else {
			lk.log.DebugContext(ctx, "lease: cannot watch the key; polling", "key", key, "err", err)
		}
	}
	if lk.queue != nil {
		return lk.acquireQueued(ctx, key, ttl, token, wake)
	}
	for attempt := 1; ; attempt++ {
		l, err := lk.tryAcquire(ctx, key, ttl)
		var held *HeldError
		if !errors.As(err, &held) {
			return l, err
		}
		// Unqueued, the waiter is woken only by stores that wake every
		// watcher of a release (a store with a queue may wake only the
		// waiters in it): it keeps its backoff, cut short by a wake-up.
		if ok, _, _ := waitFor(ctx, wake, "", lk.pause(attempt, nil, held)); !ok {
			return nil, fmt.Errorf("lease: gave up waiting for %q: %w (last: %w)", key, ctx.Err(), err)
		}
	}
}

// acquireQueued waits for key with a place in the store's queue of its
// waiters, under token, woken by wake (nil: none).
func (lk *Locker) acquireQueued(ctx context.Context, key string, ttl time.Duration, token string, wake <-chan string) (*Lease, error) {
	me := driver.WaiterID(token)
	// A place lives three polls: the waiter keeps it with every attempt.
	stay := min(3*lk.o.RetryMax, driver.MaxTTL)
	// Watching a store with hand-over, a release may grant the key with
	// the wake-up.
	handover := lk.handover != nil && wake != nil
	var last error
	for attempt, unknown := uint64(1), 0; ; attempt++ {
		sent := time.Now()
		var (
			g   Grant
			err error
		)
		if handover {
			g, err = lk.handover.AcquireHandover(ctx, key, token, ttl, lk.o.Holder, stay, attempt)
		} else {
			g, err = lk.queue.AcquireQueued(ctx, key, token, ttl, lk.o.Holder, stay)
		}
		if err == nil {
			return lk.newLease(key, token, ttl, g, sent), nil
		}
		var held *HeldError
		wait := time.Duration(0)
		switch {
		case errors.As(err, &held):
			unknown, last = 0, err
			wait = lk.pause(int(attempt), wake, held)
		case errors.Is(err, ErrInvalid):
			return nil, err
		case errors.Is(err, ErrUnavailable) && unknown+1 < lk.o.Attempts && ctx.Err() == nil:
			// The request may have been applied: the same token again
			// reconciles it.
			unknown++
			lk.log.DebugContext(ctx, "lease: acquire outcome unknown, retrying with the same token",
				"key", key, "attempt", unknown, "err", err)
			wait = lk.backoff(unknown)
		case ctx.Err() != nil:
			// Ended while waiting, maybe in the middle of an attempt
			// (whose error is then the last).
			lk.giveUp(ctx, key, token)
			if last == nil {
				last = err
			}
			return nil, fmt.Errorf("lease: gave up waiting for %q: %w (last: %w)", key, ctx.Err(), last)
		default:
			lk.giveUp(ctx, key, token)
			return nil, err
		}
		ok, fence, from := waitFor(ctx, wake, me, wait)
		if fence != 0 {
			// Handed over by a release, for ttl from the attempt whose
			// place it found: the lease's validity counts from when that
			// attempt was sent. Only a grant to the last attempt (this
			// one, sent at sent) is taken, while that validity lies
			// ahead: a later attempt found the key not this waiter's (the
			// grant had run out, while this process was not running), and
			// a grant that ran out may have been followed by another
			// holder's. The next attempt, sent at once, finds the key this
			// waiter's, with the same fence, if the grant still holds.
			if from == attempt && time.Now().Before(lk.margin().Until(sent, ttl)) {
				return lk.newLease(key, token, ttl, Grant{Fence: fence, TTL: ttl}, sent), nil
			}
			if ok {
				continue
			}
		}
		if !ok {
			lk.giveUp(ctx, key, token)
			if last == nil {
				last = err
			}
			return nil, fmt.Errorf("lease: gave up waiting for %q: %w (last: %w)", key, ctx.Err(), last)
		}
	}
}

// pause is how long a waiter sleeps after its attempt-th refusal held
// unless woken: the holder's remaining TTL, at most the backoff (no
// wake-ups) or RetryMax (with them).
func (lk *Locker) pause(attempt int, wake <-chan string, held *HeldError) time.Duration {
	wait := lk.backoff(attempt)
	if wake != nil {
		wait = lk.o.RetryMax
	}
	if held.TTL > 0 && held.TTL < wait {
		wait = held.TTL
	}
	return wait
}

// giveUp leaves key's queue and releases token in the background: an
// acquire whose outcome was unknown may have been granted.
func (lk *Locker) giveUp(ctx context.Context, key, token string) {
	go func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lk.o.ReleaseTimeout)
		defer cancel()
		lk.queue.Leave(rctx, key, token)
		lk.releaseToken(rctx, key, token)
	}()
}

// waitFor waits d, or until wake names me (or any waiter: "";
// me "" takes every wake-up) or ctx ends; it reports whether ctx is still
// live, and the fence and attempt of a grant the wake-up handed to me
// (driver.GrantWake; 0 and 0 when none).
func waitFor(ctx context.Context, wake <-chan string, me string, d time.Duration) (live bool, fence, attempt uint64) {
	if wake == nil {
		return sleep(ctx, d), 0, 0
	}
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return true, 0, 0
		case w := <-wake:
			who, fence, attempt := driver.ParseWake(w)
			switch {
			case me != "" && who == me:
				return true, fence, attempt
			case who == "" || me == "":
				return true, 0, 0
			}
		case <-ctx.Done():
			return false, 0, 0
		}
	}
}

// Do acquires key (waiting as Acquire does), keeps the lease alive by
// renewing it every ttl/3, and runs fn with a context that is cancelled when
// the lease is lost or its validity runs out, before the store can expire
// it. The context's cause is ErrLost. Afterwards Do releases the lease, even
// if ctx was cancelled (bounded by Options.ReleaseTimeout).
//
// If the lease was lost while fn ran, Do's error wraps ErrLost (and fn's
// error, if any): work done after the loss may have overlapped with another
// holder, which is why writes should pass the lease's fence to a guard.
func (lk *Locker) Do(ctx context.Context, key string, ttl time.Duration, fn func(ctx context.Context, l *Lease) error) error {
	if fn == nil {
		return fmt.Errorf("%w: nil function", ErrInvalid)
	}
	ctx, sp := lk.tel.start(ctx, "tenure.lease.do", key)
	err := lk.doHold(ctx, lk.Acquire, key, ttl, fn)
	sp.End(doOutcome(err), err != nil)
	return err
}

// TryDo is Do without waiting: it tries once to take key (as TryAcquire
// does) and, if granted, keeps the lease alive while fn runs and releases it
// afterwards, exactly as Do. If another holder has the key it returns the
// *HeldError at once, without running fn.
func (lk *Locker) TryDo(ctx context.Context, key string, ttl time.Duration, fn func(ctx context.Context, l *Lease) error) error {
	if fn == nil {
		return fmt.Errorf("%w: nil function", ErrInvalid)
	}
	ctx, sp := lk.tel.start(ctx, "tenure.lease.do", key)
	err := lk.doHold(ctx, lk.TryAcquire, key, ttl, fn)
	sp.End(doOutcome(err), err != nil)
	return err
}

// doHold takes key with acquire and, if granted, holds it while fn runs.
func (lk *Locker) doHold(ctx context.Context, acquire func(context.Context, string, time.Duration) (*Lease, error),
	key string, ttl time.Duration, fn func(ctx context.Context, l *Lease) error) error {
	l, err := acquire(ctx, key, ttl)
	if err != nil {
		return err
	}
	return lk.hold(ctx, l, fn)
}

// hold keeps l alive while fn runs with a context that ends with the lease,
// then releases l. However fn ends (a return, a panic, runtime.Goexit) the
// keep-alive stops and the lease is released before hold returns or the
// panic goes on up the stack, so a caller that recovers the panic (as
// net/http does for handlers) leaves no lease renewed behind it.
func (lk *Locker) hold(ctx context.Context, l *Lease, fn func(ctx context.Context, l *Lease) error) error {
	// fn's context ends the moment the lease does, whatever the renewal
	// loop is doing.
	ka := lk.KeepAlive(ctx)
	ka.Add(l)
	fnCtx := ka.Context()

	finish := func() error {
		ka.Stop()
		lost := l.lostErr()
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), lk.o.ReleaseTimeout)
		defer rcancel()
		if rerr := l.Release(rctx); rerr != nil && lost == nil && !errors.Is(rerr, ErrNotHeld) {
			lk.log.WarnContext(ctx, "lease: release after Do failed; the lease expires on its own", "key", l.key, "err", rerr)
		}
		if lost == nil {
			lost = l.lostErr() // validity may have run out during release
		}
		return lost
	}
	returned := false
	defer func() {
		if !returned {
			// fn panicked or called runtime.Goexit: end the tenure, and let
			// the panic go on with its own stack.
			finish()
		}
	}()
	fnErr := fn(fnCtx, l)
	returned = true

	lost := finish()
	switch {
	case lost != nil && fnErr != nil:
		return fmt.Errorf("%w while running: %w", lost, fnErr)
	case lost != nil:
		return lost
	}
	return fnErr
}

// Group keeps several leases of one holder alive with one renewal loop, as
// Do keeps its lease: each is renewed every third of its TTL (sooner again,
// with jittered backoff, while the store does not answer), and a lease
// whose validity runs out or whose renewal the store refuses ends the
// group's context with a cause wrapping ErrLost. Make one with
// Locker.KeepAlive. It is safe for concurrent use.
type Group struct {
	g *tenancy.Group
}

// KeepAlive starts an empty Group under ctx: its Context ends when ctx
// does, when a member lease is lost (the cause wraps ErrLost) and on Stop
// (the cause is context.Canceled). Renewals keep ctx's values but not its
// cancellation, so leases stay alive until Remove or Stop. Call Stop when
// done.
func (lk *Locker) KeepAlive(ctx context.Context) *Group {
	return &Group{g: tenancy.NewGroup(ctx, lk.log, "lease")}
}

// Context returns the group's context: pass it to the work the leases
// protect.
func (k *Group) Context() context.Context { return k.g.Context() }

// Add keeps l alive from now on, its first renewal a third of its TTL
// away. A lease already lost ends the group's context at once.
func (k *Group) Add(l *Lease) { k.g.Add(l.g) }

// Remove stops keeping l alive. Once it returns no renewal of l is in
// flight, so l can be released.
func (k *Group) Remove(l *Lease) { k.g.Remove(l.g) }

// Stop stops every renewal and waits for one in flight, then ends the
// group's context. The leases are not released.
func (k *Group) Stop() { k.g.Stop() }

// cleanup releases token in the background after an acquire whose outcome
// is unknown, retrying until Options.ReleaseTimeout.
func (lk *Locker) cleanup(ctx context.Context, key, token string) {
	go func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lk.o.ReleaseTimeout)
		defer cancel()
		lk.releaseToken(rctx, key, token)
	}()
}

// releaseToken releases key held by token, sending the request again while
// its outcome is unknown and ctx allows.
func (lk *Locker) releaseToken(ctx context.Context, key, token string) error {
	for attempt := 1; ; attempt++ {
		err := lk.st.Release(ctx, key, token)
		if err == nil || errors.Is(err, ErrNotHeld) || errors.Is(err, ErrInvalid) {
			return err
		}
		if !sleep(ctx, lk.backoff(attempt)) {
			return err
		}
	}
}

// backoff returns a jittered exponential delay for the given attempt (1-based).
func (lk *Locker) backoff(attempt int) time.Duration {
	return tenancy.Backoff(lk.o.RetryMin, lk.o.RetryMax, attempt)
}

// margin is the rule by which the client's validity ends before the store's
// expiry: DriftFactor of the TTL plus Margin (at most a quarter of the TTL).
func (lk *Locker) margin() tenancy.Margin {
	return tenancy.Margin{DriftFactor: lk.o.DriftFactor, Fixed: lk.o.Margin}
}

// sleep waits d or until ctx ends; it reports whether the full time passed.
func sleep(ctx context.Context, d time.Duration) bool { return tenancy.Sleep(ctx, d) }
