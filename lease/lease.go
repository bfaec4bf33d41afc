package lease

import (
	"context"
	"errors"
	"fmt"
	"github.com/tenurekit/tenure"
	"log/slog"
	"time"

	"github.com/tenurekit/tenure/internal/tenancy"
)

// errReleased is the Err of a lease its holder released.
var errReleased = fmt.Errorf("%w: released", ErrNotHeld)

// Lease is one tenure of a key: a fresh random token, a fence, and a
// validity measured on the client's monotonic clock from the moment the
// request was sent, minus a margin (Options.DriftFactor of the TTL plus
// Options.Margin, at most a quarter of the TTL), so it ends before the
// store expires the lease. It is safe for concurrent use.
//
// Pass Fence to the guard where the protected write lands; that, not the
// lease, is what stops a paused holder's late write.
type Lease struct {
	lk  *Locker
	key string
	g   *tenancy.Grant // the token is a secret.Text in it: unprintable through fmt, slog and encoders
}

func (lk *Locker) newLease(key, token string, ttl time.Duration, g Grant, sent time.Time) *Lease {
	l := &Lease{lk: lk, key: key}
	fence := g.Fence
	l.g = tenancy.New(tenancy.Config{
		Token: token, Fence: fence, TTL: ttl, Margin: lk.margin(),
		Renew: func(ctx context.Context) (time.Duration, error) {
			g, err := lk.st.Renew(ctx, key, token, ttl)
			if err == nil && g.Fence != fence {
				err = fmt.Errorf("%w: the store reports fence %d, this lease has %d", ErrLost, g.Fence, fence)
			}
			return g.TTL, err
		},
		Lost: func(err error) error {
			switch {
			case errors.Is(err, ErrLost):
				return err
			case errors.Is(err, ErrNotHeld):
				return fmt.Errorf("%w: %w", ErrLost, err)
			}
			return nil
		},
		Expired: fmt.Errorf("%w: validity of %q ran out", ErrLost, key),
		Log:     []any{"key", key},
		OnLost: func(err error) {
			lk.log.Warn("lease: lost before its holder released it", "key", key, "fence", fence, "err", err)
			lk.tel.lostLease()
		},
	}, sent, g.TTL)
	return l
}

// Key returns the leased key.
func (l *Lease) Key() string { return l.key }

// Token returns the secret random token of this tenure, as a tenure.Token
// (it prints as "REDACTED"). Guards that check the current holder need
// it: Reveal gives the text; never log that.
func (l *Lease) Token() tenure.Token { return l.g.Secret() }

// Fence returns the fencing token: strictly greater than every fence granted
// for the key before this tenure.
func (l *Lease) Fence() uint64 { return l.g.Fence() }

// TTL returns the lease time asked for at acquisition and on each renewal.
func (l *Lease) TTL() time.Duration { return l.g.TTL() }

// ValidUntil returns the end of the client's validity. It carries a
// monotonic clock reading, so time.Until(l.ValidUntil()) is immune to wall
// clock jumps.
func (l *Lease) ValidUntil() time.Time { return l.g.ValidUntil() }

// Done returns a channel closed when the lease is released, lost, or its
// validity runs out, whichever comes first.
func (l *Lease) Done() <-chan struct{} { return l.g.Done() }

// Err returns nil while the lease is valid, an error wrapping ErrLost once it
// was lost or its validity ran out, and one wrapping ErrNotHeld once it was
// released.
func (l *Lease) Err() error { return l.g.Err() }

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
	if l.lk == nil {
		return errRemoteOp
	}
	return l.g.Renew(ctx)
}

// Release ends the lease. Only this tenure's token is released; a later
// holder is never touched. A request whose outcome is unknown is sent again
// with the same token, for at most Options.ReleaseTimeout (or until ctx
// ends, if that comes first), so a release while the store cannot be
// reached returns its error rather than retrying for ever. If ctx has
// already ended, Release still runs, for Options.ReleaseTimeout. The lease
// counts as ended afterwards whatever the result; an error wrapping
// ErrNotHeld means it had already expired or been taken.
func (l *Lease) Release(ctx context.Context) error {
	if l.lk == nil {
		return errRemoteOp
	}
	if ctx.Err() != nil {
		ctx = context.WithoutCancel(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, l.lk.o.ReleaseTimeout)
	defer cancel()
	err := l.lk.releaseToken(ctx, l.key, l.g.Token())
	l.g.End(errReleased)
	return err
}

// String describes the lease without its token.
func (l *Lease) String() string {
	return fmt.Sprintf("lease{key=%q fence=%d token=REDACTED}", l.key, l.g.Fence())
}

// LogValue describes the lease to log/slog without its token.
func (l *Lease) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("key", l.key),
		slog.Uint64("fence", l.g.Fence()),
		slog.Time("valid_until", l.ValidUntil()),
	)
}

// Format makes every fmt verb print the redacted form.
func (l *Lease) Format(f fmt.State, _ rune) { fmt.Fprint(f, l.String()) }

// errRemoteOp is what Renew and Release of a lease made with Remote return.
var errRemoteOp = fmt.Errorf("%w: a tenure held elsewhere (lease.Remote) is renewed and released by its holder", ErrInvalid)

// errRemote is the Err of a lease made with Remote.
var errRemote = fmt.Errorf("%w: a tenure held elsewhere (lease.Remote): only the store knows whether it still holds its key", ErrNotHeld)

// Remote returns the lease of a tenure acquired elsewhere: by another
// process, or by a client of tenure serve that sends its key, token and
// fence with a write. It is for the guards that check the current holder
// at the store, atomically with the write (a store's HolderSet, txn.Tx's
// CheckHolder, etcdstore's Compare): they compare key, token and fence
// with the store's record and its clock, so a tenure that ended is
// refused even before the next holder wrote.
//
// This process never saw the grant, so it cannot keep the tenure alive
// or tell how long it lasts: Renew and Release return an error wrapping
// ErrInvalid and change nothing, Done is closed, ValidUntil is the zero
// time and Err wraps ErrNotHeld. The token is kept as a tenure.Token and
// prints as REDACTED, like every lease's.
func Remote(key string, token tenure.Token, fence uint64) *Lease {
	g := tenancy.New(tenancy.Config{Token: token.Reveal(), Fence: fence, Expired: errRemote, Log: []any{"key", key}}, time.Time{}, 0)
	g.End(errRemote)
	return &Lease{key: key, g: g}
}
