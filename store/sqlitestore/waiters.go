package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
)

// AcquireQueued is AcquireHolder for a waiter that keeps its place in
// key's queue for stay (leasedriver.Queuer): a free key goes to the first
// live waiter, never to a newcomer. One write transaction.
func (v leases) AcquireQueued(ctx context.Context, key, token string, ttl time.Duration, holder string, stay time.Duration) (lease.Grant, error) {
	if err := leasedriver.ValidateQueued(key, token, ttl, holder, stay); err != nil {
		return lease.Grant{}, err
	}
	s := v.s
	me := leasedriver.WaiterID(token)
	ttlUS, stayUS := micros(ttl), micros(stay)
	var (
		f      int64
		waited time.Duration
		held   *lease.HeldError // a refusal, committed with the waiter's place
	)
	entered := time.Now()
	err := s.write(ctx, "acquire", key, func(tx *sql.Tx, _ int64) error {
		held = nil
		var now int64
		waited, now = s.applyTime(entered)
		if _, err := tx.ExecContext(ctx, s.q.expired, key, now); err != nil {
			return unavailable("acquire", key, err)
		}
		var first sql.NullString
		if err := tx.QueryRowContext(ctx, s.q.firstWaiter, key, now).Scan(&first); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return unavailable("acquire", key, err)
		}
		mine, err := v.heldBy(ctx, tx, key, token, now)
		if err != nil {
			return err
		}
		if !first.Valid || first.String == me || mine {
			err := tx.QueryRowContext(ctx, s.q.acquireFirst, key, token, now, ttlUS, holder).Scan(&f)
			if err == nil {
				if _, err := tx.ExecContext(ctx, s.q.dequeue, key, me); err != nil {
					return unavailable("acquire", key, err)
				}
				return nil
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return unavailable("acquire", key, err)
			}
		}
		// Refused: the waiter takes or keeps its place.
		var seq, ahead, left int64
		if err := tx.QueryRowContext(ctx, s.q.queue, key, me, now, stayUS).Scan(&seq); err != nil {
			return unavailable("acquire", key, err)
		}
		if err := tx.QueryRowContext(ctx, s.q.ahead, key, me, now, seq).Scan(&ahead); err != nil {
			return unavailable("acquire", key, err)
		}
		var who string
		err = tx.QueryRowContext(ctx, s.q.heldTTL, key, now).Scan(&left, &who)
		switch {
		case errors.Is(err, sql.ErrNoRows) && ahead > 0:
			held = &lease.HeldError{Key: key, Position: int(ahead)} // free, promised to a waiter ahead
		case errors.Is(err, sql.ErrNoRows):
			held = &lease.HeldError{Key: key, TTL: time.Microsecond}
		case err != nil:
			return unavailable("acquire", key, err)
		default:
			held = &lease.HeldError{Key: key, TTL: time.Duration(left) * time.Microsecond, Holder: who, Position: int(ahead)}
		}
		return nil
	})
	if err != nil {
		return lease.Grant{}, err
	}
	if held != nil {
		return lease.Grant{}, held
	}
	return lease.Grant{Fence: uint64(f), TTL: time.Duration(ttlUS)*time.Microsecond + waited}, nil
}

// heldBy reports whether token holds key now.
func (v leases) heldBy(ctx context.Context, tx *sql.Tx, key, token string, now int64) (bool, error) {
	var (
		tok sql.NullString
		exp sql.NullInt64
		who string
	)
	err := tx.QueryRowContext(ctx, v.s.q.holderOf, key).Scan(&tok, &exp, &who)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, unavailable("acquire", key, err)
	}
	return tok.Valid && tok.String == token && exp.Valid && exp.Int64 > now, nil
}

// Leave gives token's place in key's queue up (leasedriver.Queuer). A
// waiter that was first leaves a free key to the next one, which is woken.
func (v leases) Leave(ctx context.Context, key, token string) error {
	if err := leasedriver.ValidateLeave(key, token); err != nil {
		return err
	}
	s := v.s
	me := leasedriver.WaiterID(token)
	var wake bool
	var next sql.NullString
	err := s.write(ctx, "leave", key, func(tx *sql.Tx, now int64) error {
		wake, next = false, sql.NullString{}
		var first sql.NullString
		if err := tx.QueryRowContext(ctx, s.q.firstWaiter, key, now).Scan(&first); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return unavailable("leave", key, err)
		}
		if _, err := tx.ExecContext(ctx, s.q.dequeue, key, me); err != nil {
			return unavailable("leave", key, err)
		}
		if first.String != me {
			return nil
		}
		var left int64
		var who string
		err := tx.QueryRowContext(ctx, s.q.heldTTL, key, now).Scan(&left, &who)
		if err == nil {
			return nil // held: the release wakes the next waiter
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return unavailable("leave", key, err)
		}
		if err := tx.QueryRowContext(ctx, s.q.firstWaiter, key, now).Scan(&next); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return unavailable("leave", key, err)
		}
		wake = true
		return nil
	})
	if err == nil && wake {
		s.wakeWaiters(key, next.String)
	}
	return err
}

// Watch returns a channel that receives when key is released or the
// waiter first in its queue leaves (leasedriver.Waker), naming the waiter
// that is first now. Wake-ups travel inside the process, between the
// stores on one database file (or, for a database from New, of the store
// itself): a waiter in another process polls, still in arrival order. An
// expiry sends nothing: a waiter polls at the holder's remaining TTL.
func (v leases) Watch(ctx context.Context, key, waiter string) (<-chan string, func(), error) {
	if err := leasedriver.ValidateKey(key); err != nil {
		return nil, nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	ch, stop := v.s.wq.wakes.Watch(v.s.wakeKey(key), waiter)
	return ch, stop, nil
}

// wakeKey is key in the database's wake hub, which the stores of every
// table prefix on the file share.
func (s *Store) wakeKey(key string) string { return s.q.prefix + "\x00" + key }

// wakeWaiters wakes the watchers of key, naming who (a WaiterID, or "").
func (s *Store) wakeWaiters(key, who string) { s.wq.wakes.Wake(s.wakeKey(key), who) }
