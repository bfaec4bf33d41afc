package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/tenurekit/tenure/internal/secret"
)

// errReleased is the Err of a lease its holder released.
var errReleased = fmt.Errorf("%w: released", ErrNotHeld)

// Lease is one tenure of a key: a fresh random token, a fence, and a
// validity measured on the client's monotonic clock from the moment the
// request was sent, minus a margin, so it ends before the store expires
// the lease. It is safe for concurrent use.
//
// Pass Fence to the guard where the protected write lands; that, not the
// lease, is what stops a paused holder's late write.
type Lease struct {
	lk    *Locker
	key   string
	token secret.Text // unprintable through fmt, slog and encoders, even when a Lease is printed by value
	ttl   time.Duration
	fence uint64

	renewMu sync.Mutex // one renewal at a time, so validity follows the last one applied

	mu    sync.Mutex
	until time.Time // carries a monotonic reading
	timer *time.Timer
	done  chan struct{}
	err   error
}

func (lk *Locker) newLease(key, token string, ttl time.Duration, g Grant, sent time.Time) *Lease {
	l := &Lease{lk: lk, key: key, token: secret.New(token), ttl: ttl, fence: g.Fence, done: make(chan struct{})}
	l.until = sent.Add(g.TTL - lk.margin(g.TTL))
	l.mu.Lock() // the timer may fire before it is assigned
	l.timer = time.AfterFunc(time.Until(l.until), l.checkValidity)
	l.mu.Unlock()
	return l
}

// Key returns the leased key.
func (l *Lease) Key() string { return l.key }

// Token returns the secret random token of this tenure. Guards that check the
// current holder need it; never log it.
func (l *Lease) Token() string { return l.token.Reveal() }

// Fence returns the fencing token: strictly greater than every fence granted
// for the key before this tenure.
func (l *Lease) Fence() uint64 { return l.fence }

// TTL returns the lease time asked for at acquisition and on each renewal.
func (l *Lease) TTL() time.Duration { return l.ttl }

// ValidUntil returns the end of the client's validity. It carries a
// monotonic clock reading, so time.Until(l.ValidUntil()) is immune to wall
// clock jumps.
func (l *Lease) ValidUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// Done returns a channel closed when the lease is released, lost, or its
// validity runs out, whichever comes first.
func (l *Lease) Done() <-chan struct{} { return l.done }

// Err returns nil while the lease is valid, an error wrapping ErrLost once it
// was lost or its validity ran out, and one wrapping ErrNotHeld once it was
// released.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// lostErr returns Err if it wraps ErrLost, else nil.
func (l *Lease) lostErr() error {
	if err := l.Err(); errors.Is(err, ErrLost) {
		return err
	}
	return nil
}

// Renew extends the lease by its TTL from the moment the request is sent.
// If the store says the token no longer holds the key, the lease ends and
// the error wraps both ErrLost and ErrNotHeld. Any other error (the store
// did not answer) leaves the lease valid until its current validity runs
// out.
func (l *Lease) Renew(ctx context.Context) error {
	l.renewMu.Lock()
	defer l.renewMu.Unlock()
	if err := l.Err(); err != nil {
		return err
	}
	sent := time.Now()
	g, err := l.lk.st.Renew(ctx, l.key, l.token.Reveal(), l.ttl)
	if errors.Is(err, ErrNotHeld) {
		return l.end(fmt.Errorf("%w: %w", ErrLost, err))
	}
	if err != nil {
		return err
	}
	if g.Fence != l.fence {
		return l.end(fmt.Errorf("%w: the store reports fence %d, this lease has %d", ErrLost, g.Fence, l.fence))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		// Validity ran out while the request was in flight: the lease was
		// already reported lost and stays so.
		return l.err
	}
	l.until = sent.Add(g.TTL - l.lk.margin(g.TTL))
	l.timer.Reset(time.Until(l.until))
	return nil
}

// Release ends the lease. Only this tenure's token is released; a later
// holder is never touched. A request whose outcome is unknown is sent again
// with the same token. If ctx has already ended, Release still runs with
// Options.ReleaseTimeout. The lease counts as ended afterwards whatever the
// result; an error wrapping ErrNotHeld means it had already expired or been
// taken.
func (l *Lease) Release(ctx context.Context) error {
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), l.lk.o.ReleaseTimeout)
		defer cancel()
	}
	err := l.lk.releaseToken(ctx, l.key, l.token.Reveal())
	l.end(errReleased)
	return err
}

// checkValidity runs when the validity timer fires.
func (l *Lease) checkValidity() {
	l.mu.Lock()
	if wait := time.Until(l.until); wait > 0 && l.err == nil {
		l.timer.Reset(wait) // renewed meanwhile
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	l.end(fmt.Errorf("%w: validity of %q ran out", ErrLost, l.key))
}

// end closes Done with err unless the lease already ended; it returns the
// lease's final error.
func (l *Lease) end(err error) error {
	l.mu.Lock()
	first := l.err == nil
	if first {
		l.err = err
		l.timer.Stop()
		close(l.done)
	}
	err = l.err
	l.mu.Unlock()
	if first && errors.Is(err, ErrLost) {
		// Outside the lock: a log handler may call back into the lease.
		l.lk.log.Warn("lease: lost before its holder released it", "key", l.key, "fence", l.fence, "err", err)
		l.lk.tel.lostLease()
	}
	return err
}

// String describes the lease without its token.
func (l *Lease) String() string {
	return fmt.Sprintf("lease{key=%q fence=%d token=REDACTED}", l.key, l.fence)
}

// LogValue describes the lease to log/slog without its token.
func (l *Lease) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("key", l.key),
		slog.Uint64("fence", l.fence),
		slog.Time("valid_until", l.ValidUntil()),
	)
}

// Format makes every fmt verb print the redacted form.
func (l *Lease) Format(f fmt.State, _ rune) { fmt.Fprint(f, l.String()) }
