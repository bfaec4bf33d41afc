package election

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/tenurekit/tenure/internal/tenancy"
	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
)

// KeyPrefix is put before an election's name to make its lease key.
const KeyPrefix = "election/"

// DefaultTTL is the term's lease TTL when Options.TTL is zero.
const DefaultTTL = 15 * time.Second

// DefaultObserveEvery is the longest Observe waits between two reads of
// the leader when Options.ObserveEvery is zero.
const DefaultObserveEvery = time.Second

// observeFloor and observeCap bound Observe's waits after reads of a term
// with no time left that has not yet ended on the store: from the first,
// doubling, to the second (or ObserveEvery, if less).
const (
	observeFloor = 20 * time.Millisecond
	observeCap   = 100 * time.Millisecond
)

// ErrInvalid reports bad input; it is tenure.ErrInvalid's kind.
var ErrInvalid = lease.ErrInvalid

// ErrResigned is the error of a term that its leader resigned.
var ErrResigned = errors.New("election: the term was resigned")

// Options configure an Election. Nil, and the zero value of each field,
// mean the defaults.
type Options struct {
	// TTL is the term's lease: how long the store keeps the term of a
	// leader that stopped renewing it (crashed, paused, cut off) before
	// another campaigner can lead. The leader renews it every third of
	// it. Default DefaultTTL (15s); lease/driver.MinTTL to MaxTTL.
	TTL time.Duration
	// Holder describes this campaigner (host, pod, process) in Leader:
	// at most lease/driver.MaxHolderLen bytes of printable UTF-8, no
	// secrets. Default lease.DefaultHolder() (host name and process ID).
	Holder string
	// ObserveEvery is the longest Observe waits between two reads of the
	// leader (it also reads when the store wakes it, and when the leader's
	// time runs out: every 20ms to 100ms while the store reports a term
	// with no time left that has not ended yet, as etcd does for the last
	// second of a lease). Default DefaultObserveEvery (1s).
	ObserveEvery time.Duration
	// Lease configures the lease.Locker the election campaigns with (its
	// Holder is replaced by Holder). Default: lease.Options' defaults.
	Lease *lease.Options
	// Logger receives warnings (a term lost). Default: discard.
	Logger *slog.Logger
}

// Election is one election, by name, on a store. It is safe for concurrent
// use; each Campaign is one campaigner.
type Election struct {
	store lease.Store
	name  string
	key   string
	ttl   time.Duration
	every time.Duration
	lk    *lease.Locker
	log   *slog.Logger
}

// New returns the election name on store. A nil store, a name that is not
// a valid lease key once prefixed, or an option out of range is an error
// wrapping ErrInvalid. New does not contact the store.
func New(store lease.Store, name string, o *Options) (*Election, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: election: nil store", ErrInvalid)
	}
	if name == "" {
		return nil, fmt.Errorf("%w: election: empty name", ErrInvalid)
	}
	key := KeyPrefix + name
	if err := leasedriver.ValidateKey(key); err != nil {
		return nil, fmt.Errorf("election: name: %w", err)
	}
	var opts Options
	if o != nil {
		opts = *o
	}
	e := &Election{store: store, name: name, key: key, ttl: opts.TTL, every: opts.ObserveEvery, log: opts.Logger}
	if e.ttl == 0 {
		e.ttl = DefaultTTL
	}
	if err := leasedriver.ValidateTTL(e.ttl); err != nil {
		return nil, fmt.Errorf("election: Options.TTL: %w", err)
	}
	if e.every == 0 {
		e.every = DefaultObserveEvery
	}
	if e.every < 0 {
		return nil, fmt.Errorf("%w: election: Options.ObserveEvery is %v, must not be negative", ErrInvalid, e.every)
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	var lo lease.Options
	if opts.Lease != nil {
		lo = *opts.Lease
	}
	lo.Holder = opts.Holder
	if lo.Logger == nil {
		lo.Logger = opts.Logger
	}
	lk, err := lease.New(store, &lo)
	if err != nil {
		return nil, fmt.Errorf("election: %w", err)
	}
	e.lk = lk
	return e, nil
}

// Name returns the election's name.
func (e *Election) Name() string { return e.name }

// Key returns the election's lease key (KeyPrefix + name).
func (e *Election) Key() string { return e.key }

// Holder returns this campaigner's holder description.
func (e *Election) Holder() string { return e.lk.Holder() }

// Campaign waits until this campaigner leads, in arrival order among the
// campaigners (on a store with a queue of waiters), and returns its term,
// kept alive until Resign or until it ends. ctx bounds the wait only:
// when it ends first, the error wraps ctx.Err() and the campaigner's place
// is given up.
func (e *Election) Campaign(ctx context.Context) (*Term, error) {
	l, err := e.lk.Acquire(ctx, e.key, e.ttl)
	if err != nil {
		return nil, err
	}
	ka := e.lk.KeepAlive(context.WithoutCancel(ctx))
	ka.Add(l)
	t := &Term{e: e, l: l, ka: ka}
	go func() {
		<-ka.Context().Done()
		if err := t.Err(); err != nil && !errors.Is(err, ErrResigned) {
			e.log.Warn("election: the term ended", "election", e.name, "fence", l.Fence(), "err", err)
		}
	}()
	return t, nil
}

// Term is one leader's term.
type Term struct {
	e        *Election
	l        *lease.Lease
	ka       *lease.Group
	resigned atomic.Bool
}

// Fence is the term's fence: greater than every earlier term's.
func (t *Term) Fence() uint64 { return t.l.Fence() }

// Lease is the term's lease, for the guards (fence.Guard, a store's
// CheckHolder or HolderSet).
func (t *Term) Lease() *lease.Lease { return t.l }

// Context ends when the term does: resigned, refused a renewal, or
// validity run out (before the store can end it). Pass it to the leader's
// work.
func (t *Term) Context() context.Context { return t.ka.Context() }

// Done is closed when the term ends (see Context).
func (t *Term) Done() <-chan struct{} { return t.ka.Context().Done() }

// Err is nil while the term lasts; then ErrResigned after Resign, or an
// error wrapping lease.ErrLost when the term was lost.
func (t *Term) Err() error {
	ctx := t.ka.Context()
	if ctx.Err() == nil {
		return nil
	}
	cause := context.Cause(ctx)
	if errors.Is(cause, lease.ErrLost) || !t.resigned.Load() {
		return cause
	}
	return ErrResigned
}

// Resign ends the term: the keep-alive stops and the lease is released, so
// the next campaigner leads at once. Resigning a term that ended already
// is not an error. A release the store does not answer is sent again for
// at most the lease's ReleaseTimeout (lease.Options; default 5s), then its
// error is returned and the term ends on the store at its TTL.
func (t *Term) Resign(ctx context.Context) error {
	if t.ka.Context().Err() == nil {
		t.resigned.Store(true)
	}
	t.ka.Stop()
	err := t.l.Release(ctx)
	if errors.Is(err, lease.ErrNotHeld) {
		return nil
	}
	return err
}

// Leader is who leads an election, as the store reported it.
type Leader struct {
	// Holder is the leader's holder description ("" if it keeps none).
	Holder string
	// Fence is its term's fence; 0 when no one leads.
	Fence uint64
	// TTL is the time its term had left when read.
	TTL time.Duration
}

// Elected reports whether someone leads.
func (l Leader) Elected() bool { return l.Fence != 0 }

// Leader reads who leads now: the zero Leader when no one does. A store
// that cannot be reached is an error wrapping lease.ErrUnavailable.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	info, err := e.store.Inspect(ctx, e.key)
	if err != nil {
		return Leader{}, err
	}
	if !info.Held {
		return Leader{}, nil
	}
	return Leader{Holder: info.Holder, Fence: info.Fence, TTL: info.TTL}, nil
}

// Observe follows the election's leader: it yields the leader when it
// first reads it and again whenever it changes (another term, or no one
// leading: the zero Leader), until the loop stops or ctx ends. Every
// leader it yields was the store's leader when read, and terms come in
// order: a term's fence is never yielded after a greater one. A read that
// fails yields the error (with the zero Leader) and is retried after
// ObserveEvery.
func (e *Election) Observe(ctx context.Context) iter.Seq2[Leader, error] {
	return func(yield func(Leader, error) bool) {
		var wake <-chan string
		if w, ok := e.store.(leasedriver.Waker); ok {
			if ch, stop, err := w.Watch(ctx, e.key, ""); err == nil {
				wake = ch
				defer stop()
			}
		}
		first := true
		var last Leader
		var highest uint64
		var zeroOf uint64 // the term last read with no time left,
		atZero := 0       // and how many reads in a row said so
		for ctx.Err() == nil {
			cur, err := e.Leader(ctx)
			wait := e.every
			switch {
			case err != nil:
				if ctx.Err() != nil {
					return
				}
				if !yield(Leader{}, err) {
					return
				}
			case cur.Fence != 0 && cur.Fence < highest:
				// An older term than one already yielded (a store that
				// lost its data): not reported.
			default:
				if first || cur.Fence != last.Fence {
					first = false
					last = cur
					highest = max(highest, cur.Fence)
					if !yield(cur, nil) {
						return
					}
				}
				if cur.Elected() {
					// The term may end when its time runs out. A store
					// that reports time left in whole units (etcd: seconds)
					// says 0 for the last of it: read again soon, then
					// less often, until the term is gone.
					if cur.TTL > 0 {
						zeroOf = 0
						wait = min(wait, cur.TTL)
					} else {
						if zeroOf != cur.Fence {
							zeroOf, atZero = cur.Fence, 0
						}
						atZero++
						wait = tenancy.Backoff(min(observeFloor, wait), min(observeCap, wait), atZero)
					}
				}
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
			case <-wake:
			case <-t.C:
			}
			t.Stop()
		}
	}
}

// Callbacks are Run's hooks; each may be nil.
type Callbacks struct {
	// OnStartedLeading runs while this campaigner leads, with the term's
	// context (see Term.Context). When it returns the term is resigned.
	// When nil, Run leads until the term ends or ctx does.
	OnStartedLeading func(ctx context.Context, t *Term)
	// OnStoppedLeading is called when a term of this campaigner ended,
	// with Term.Err.
	OnStoppedLeading func(err error)
	// OnNewLeader is called with each leader Observe reports (this
	// campaigner included), from a goroutine of its own. An error reading
	// the leader is logged (Options.Logger) and reading goes on.
	OnNewLeader func(Leader)
}

// Run campaigns until ctx ends: each time it leads it runs
// OnStartedLeading with the term, resigns when that returns, panics or
// when the term ends, calls OnStoppedLeading, and campaigns again (after
// a short backoff, growing to ObserveEvery, when terms keep ending within
// a third of the TTL). It returns ctx's error, once OnNewLeader has
// returned.
func (e *Election) Run(ctx context.Context, cb Callbacks) error {
	if cb.OnNewLeader != nil {
		octx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		defer func() { cancel(); <-done }()
		go func() {
			defer close(done)
			for l, err := range e.Observe(octx) {
				if err != nil {
					e.log.Warn("election: cannot read the leader; reading again", "election", e.name, "err", err)
					continue
				}
				cb.OnNewLeader(l)
			}
		}()
	}
	short := 0 // terms in a row that ended within a third of the TTL
	for ctx.Err() == nil {
		t, err := e.Campaign(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			e.log.Warn("election: campaign failed; campaigning again", "election", e.name, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(e.every):
			}
			continue
		}
		began := time.Now()
		e.lead(ctx, t, cb)
		// A term given up at once (OnStartedLeading returned straight
		// away, again and again) would campaign in a tight loop against
		// the store when no one else campaigns: such terms are spaced out
		// by a backoff that grows to ObserveEvery.
		if time.Since(began) >= e.ttl/3 {
			short = 0
			continue
		}
		short++
		select {
		case <-ctx.Done():
		case <-time.After(tenancy.Backoff(min(5*time.Millisecond, e.every), e.every, short)):
		}
	}
	return ctx.Err()
}

// lead runs OnStartedLeading with t (or waits for t to end when it is
// nil), then resigns t and calls OnStoppedLeading. It does both also when
// OnStartedLeading panics, before the panic goes on: a leader whose work
// died must not keep its term alive.
func (e *Election) lead(ctx context.Context, t *Term, cb Callbacks) {
	wctx, cancel := context.WithCancel(t.Context())
	stop := context.AfterFunc(ctx, cancel)
	defer func() {
		stop()
		cancel()
		// Bounded by the lease's ReleaseTimeout.
		if err := t.Resign(context.WithoutCancel(ctx)); err != nil {
			e.log.Warn("election: resign failed; the term expires on its own", "election", e.name, "err", err)
		}
		if cb.OnStoppedLeading != nil {
			cb.OnStoppedLeading(t.Err())
		}
	}()
	if cb.OnStartedLeading != nil {
		cb.OnStartedLeading(wctx, t)
	} else {
		<-wctx.Done()
	}
}
