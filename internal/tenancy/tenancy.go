// Package tenancy is the tenure every fenced primitive builds on: a lease
// lock, an idempotency claim and a concurrency permit are each a Grant (a
// secret token, a fence and a validity on the client's monotonic clock)
// kept alive by a Group.
//
// # Validity
//
// A grant for ttl whose request was sent at sent is valid until
//
//	sent + ttl - Margin.Of(ttl)
//
// on the monotonic clock. It is measured from when the request was sent,
// never from when the reply came: the store started the ttl no earlier
// than it received the request, so the holder's validity ends no later
// than the store's expiry, however long the reply took. The margin is
// the one rule every primitive uses:
//
//	Margin.Of(ttl) = ttl*DriftFactor + min(Fixed, ttl/4)
//
// The drift part covers clocks that run at different rates on client and
// store (an error proportional to the interval measured); the fixed part
// covers what does not scale with the ttl (the store's expiry resolution,
// the time between reading the clock and the request leaving), capped at
// a quarter of the ttl so that a very short ttl keeps a usable validity.
// The defaults (DefaultMargin) are 1% and 2ms.
//
// A renewal moves the validity to its own send time plus the ttl it was
// granted, minus the margin; a renewal that fails leaves it where it was.
package tenancy

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/tenurekit/tenure/internal/secret"
)

// Margin is the safety margin rule: see the package documentation.
type Margin struct {
	// DriftFactor is the share of the ttl subtracted, in [0, 0.5).
	DriftFactor float64
	// Fixed is subtracted on top, at most a quarter of the ttl.
	Fixed time.Duration
}

// DefaultMargin is 1% of the ttl plus 2ms (at most a quarter of the ttl).
var DefaultMargin = Margin{DriftFactor: 0.01, Fixed: 2 * time.Millisecond}

// Of returns the margin subtracted from a grant of ttl.
func (m Margin) Of(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*m.DriftFactor) + min(m.Fixed, ttl/4)
}

// Until returns the validity of a grant of ttl whose request was sent at
// sent (a time.Now reading, so it carries the monotonic clock).
func (m Margin) Until(sent time.Time, ttl time.Duration) time.Time {
	return sent.Add(ttl - m.Of(ttl))
}

// Config describes a grant to New.
type Config struct {
	// Token is the grant's secret token.
	Token string
	// Fence is the grant's fencing token.
	Fence uint64
	// TTL is the lease time asked for at acquisition and on each renewal;
	// the keep-alive renews every TTL/3.
	TTL time.Duration
	// Margin is the safety margin rule.
	Margin Margin
	// Renew sends one renewal and returns the ttl the store granted. Nil:
	// the grant cannot be renewed (Renew returns ErrNoRenew).
	Renew func(ctx context.Context) (time.Duration, error)
	// Lost maps a renewal's error to the error that ends the grant as lost,
	// or nil when the error leaves the grant valid (the store did not
	// answer). Nil: every error leaves it valid.
	Lost func(err error) error
	// Expired is the grant's error once its validity ran out.
	Expired error
	// Log describes the grant in log records, as slog key-value pairs
	// (never the token).
	Log []any
	// OnLost, if set, is called once, outside every lock, when the grant
	// ends as lost (a refused renewal or the validity running out).
	OnLost func(err error)
}

// Grant is one tenure: a token, a fence and a validity that a renewal
// extends. It is safe for concurrent use.
type Grant struct {
	c     Config
	token secret.Text

	renewMu sync.Mutex // one renewal at a time, so validity follows the last one applied

	mu    sync.Mutex
	until time.Time // carries a monotonic reading
	sent  time.Time // the send time of the request behind until
	timer *time.Timer
	done  chan struct{}
	err   error
	lost  bool
	hooks []func()
}

// New returns the grant of c whose request was sent at sent and granted
// ttl by the store. Its validity timer starts at once.
func New(c Config, sent time.Time, ttl time.Duration) *Grant {
	g := &Grant{c: c, token: secret.New(c.Token), done: make(chan struct{})}
	g.c.Token = "" // kept only as a secret.Text
	g.mu.Lock()    // the timer may fire before it is assigned
	g.until, g.sent = c.Margin.Until(sent, ttl), sent
	g.timer = time.AfterFunc(time.Until(g.until), g.checkValidity)
	g.mu.Unlock()
	return g
}

// Token returns the secret token. Never log it.
func (g *Grant) Token() string { return g.token.Reveal() }

// Secret returns the token as a secret.Text.
func (g *Grant) Secret() secret.Text { return g.token }

// Fence returns the fencing token.
func (g *Grant) Fence() uint64 { return g.c.Fence }

// TTL returns the lease time asked for.
func (g *Grant) TTL() time.Duration { return g.c.TTL }

// ValidUntil returns the end of the validity, with a monotonic reading.
func (g *Grant) ValidUntil() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.until
}

// Done is closed when the grant ends: lost, run out, or ended by End.
func (g *Grant) Done() <-chan struct{} { return g.done }

// Err returns nil while the grant holds, and the error it ended with
// afterwards.
func (g *Grant) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// Lost reports whether the grant ended as lost (a refused renewal or the
// validity running out) rather than by End.
func (g *Grant) Lost() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lost
}

// ErrNoRenew is Renew's error for a grant without a Config.Renew.
var ErrNoRenew = errorString("tenancy: the grant cannot be renewed")

type errorString string

func (e errorString) Error() string { return string(e) }

// Renew sends one renewal. On success the validity moves to the renewal's
// send time plus the granted ttl, minus the margin. An error that
// Config.Lost maps to a loss ends the grant and is returned as mapped; any
// other error leaves the validity where it was. A grant that has ended
// returns its error without sending anything, as does one whose validity
// ran out while the renewal was in flight.
func (g *Grant) Renew(ctx context.Context) error {
	g.renewMu.Lock()
	defer g.renewMu.Unlock()
	if err := g.Err(); err != nil {
		return err
	}
	if g.c.Renew == nil {
		return ErrNoRenew
	}
	sent := time.Now()
	ttl, err := g.c.Renew(ctx)
	if err != nil {
		if g.c.Lost != nil {
			if lerr := g.c.Lost(err); lerr != nil {
				return g.end(lerr, true)
			}
		}
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		return g.err
	}
	g.until, g.sent = g.c.Margin.Until(sent, ttl), sent
	g.timer.Reset(time.Until(g.until))
	return nil
}

// End ends the grant with err unless it already ended (the holder released
// it, or its work is over) and returns the grant's final error.
func (g *Grant) End(err error) error { return g.end(err, false) }

// Lose ends the grant as lost with err unless it already ended, and
// returns the grant's final error.
func (g *Grant) Lose(err error) error { return g.end(err, true) }

func (g *Grant) checkValidity() {
	g.mu.Lock()
	if wait := time.Until(g.until); wait > 0 && g.err == nil {
		g.timer.Reset(wait) // renewed meanwhile
		g.mu.Unlock()
		return
	}
	g.mu.Unlock()
	g.end(g.c.Expired, true)
}

func (g *Grant) end(err error, lost bool) error {
	g.mu.Lock()
	first := g.err == nil
	var hooks []func()
	if first {
		g.err, g.lost = err, lost
		g.timer.Stop()
		close(g.done)
		hooks, g.hooks = g.hooks, nil
	}
	err = g.err
	g.mu.Unlock()
	if first {
		// Outside the lock: a hook or a log handler may call back in.
		if lost && g.c.OnLost != nil {
			g.c.OnLost(err)
		}
		for _, h := range hooks {
			h()
		}
	}
	return err
}

// whenEnded calls f once the grant ends (at once if it has).
func (g *Grant) whenEnded(f func()) {
	g.mu.Lock()
	if g.err == nil {
		g.hooks = append(g.hooks, f)
		g.mu.Unlock()
		return
	}
	g.mu.Unlock()
	f()
}

// interval is how often the keep-alive renews g.
func (g *Grant) interval() time.Duration { return max(g.c.TTL/3, time.Millisecond) }

// renewDue returns when the keep-alive renews g next, at now or later: a
// third of the ttl after the send time of the request that gave g its
// validity (the acquisition or the last renewal applied), so that a grant
// whose reply came late (the request waited at the store) is renewed as
// early as one that came at once, not a third of the ttl after the reply.
// A grant whose validity is already less than two thirds of the ttl is
// renewed at once.
func (g *Grant) renewDue(now time.Time) time.Time {
	g.mu.Lock()
	due := g.sent.Add(g.interval())
	g.mu.Unlock()
	if due.After(now.Add(g.interval())) {
		due = now.Add(g.interval())
	}
	if due.Before(now) {
		due = now
	}
	return due
}

// retry is the jittered delay before renewing g again after fails failed
// renewals in a row: from TTL/10, doubling, at most TTL/3.
func (g *Grant) retry(fails int) time.Duration {
	return Backoff(max(g.c.TTL/10, time.Millisecond), g.interval(), fails)
}

// Backoff returns a jittered exponential delay for attempt (1-based): lo
// doubled per attempt, at most hi, half of it fixed and half random, so
// that waiters spread out but still back off.
func Backoff(lo, hi time.Duration, attempt int) time.Duration {
	d := lo << min(max(attempt-1, 0), 20)
	if d <= 0 || d > hi {
		d = hi
	}
	return d/2 + rand.N(d/2+1)
}

// Sleep waits d or until ctx ends; it reports whether the full time passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	if ctx.Err() != nil {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
