package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
)

// Leases returns the store's lease.Store view.
func (s *Store) Leases() lease.Store { return leases{s} }

type leases struct{ s *Store }

// The lease view queues its waiters and wakes them.
var (
	_ leasedriver.Queuer = leases{}
	_ leasedriver.Waker  = leases{}
)

// micros returns d in whole microseconds, rounded up so that a grant is
// never shorter than asked.
func micros(d time.Duration) int64 {
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

// write runs fn in a write transaction (see Store.writeTx), with database
// errors wrapped by unavailable.
func (s *Store) write(ctx context.Context, op, key string, fn func(tx *sql.Tx, now int64) error) error {
	return s.writeTx(ctx, opLane(op), func(err error) error { return unavailable(op, key, err) }, fn)
}

func (v leases) Acquire(ctx context.Context, key, token string, ttl time.Duration) (lease.Grant, error) {
	return v.AcquireHolder(ctx, key, token, ttl, "")
}

// AcquireHolder is Acquire that keeps holder with the grant
// (leasedriver.HolderAcquirer), in the holder column.
func (v leases) AcquireHolder(ctx context.Context, key, token string, ttl time.Duration, holder string) (lease.Grant, error) {
	if err := leasedriver.Validate(key, token, ttl); err != nil {
		return lease.Grant{}, err
	}
	if err := leasedriver.ValidateHolder(holder); err != nil {
		return lease.Grant{}, err
	}
	s := v.s
	// A key another token holds is refused on a read, without the write
	// lock: waiters that poll a held key (lease.Locker.Acquire, a
	// scheduler's overlap gate) do not queue with the writers. The refusal
	// is linearizable at the read: the key was held then.
	if held, err := v.heldElsewhere(ctx, key, token); err != nil || held != nil {
		if err != nil {
			return lease.Grant{}, err
		}
		return lease.Grant{}, held
	}
	ttlUS := micros(ttl)
	var (
		f      int64
		waited time.Duration
	)
	entered := time.Now()
	err := s.write(ctx, "acquire", key, func(tx *sql.Tx, _ int64) error {
		var now int64
		waited, now = s.applyTime(entered)
		err := tx.QueryRowContext(ctx, s.q.acquire, key, token, now, ttlUS, holder).Scan(&f)
		if err == nil {
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return unavailable("acquire", key, err)
		}
		// Held by another token, or promised to the waiters queued for
		// it. The transaction still holds the write lock, so what is read
		// here is what refused us.
		var left, ahead int64
		var who string
		if err := tx.QueryRowContext(ctx, s.q.waiting, key, now).Scan(&ahead); err != nil {
			return unavailable("acquire", key, err)
		}
		err = tx.QueryRowContext(ctx, s.q.heldTTL, key, now).Scan(&left, &who)
		switch {
		case errors.Is(err, sql.ErrNoRows) && ahead > 0:
			return &lease.HeldError{Key: key, Position: int(ahead)} // free, promised to a waiter
		case errors.Is(err, sql.ErrNoRows):
			return unavailable("acquire", key, errors.New("the refusing holder vanished inside the transaction"))
		case err != nil:
			return unavailable("acquire", key, err)
		}
		return &lease.HeldError{Key: key, TTL: time.Duration(left) * time.Microsecond, Holder: who, Position: int(ahead)}
	})
	if err != nil {
		return lease.Grant{}, err
	}
	return lease.Grant{Fence: uint64(f), TTL: time.Duration(ttlUS)*time.Microsecond + waited}, nil
}

// applyTime reads the store's clock for a request that entered the store
// at entered (a time.Now reading) and now holds the write lock. It returns
// the clock in µs and how long the request waited inside the store (for
// the write queue and the lock), read before the clock. A grant reports
// that wait on top of its ttl (lease.Grant.TTL counts from when the store
// received the request, no later than the holder sent it): the store's
// expiry is the clock read here plus the ttl, so a holder whose validity
// runs from its send time loses none of it to the queue, however long the
// queue was.
func (s *Store) applyTime(entered time.Time) (time.Duration, int64) {
	waited := time.Since(entered)
	return waited, s.nowUS()
}

// heldElsewhere reads key outside a transaction: a *lease.HeldError when a
// token other than token holds it now, nil when the acquisition may go on.
func (v leases) heldElsewhere(ctx context.Context, key, token string) (*lease.HeldError, error) {
	s := v.s
	var (
		tok sql.NullString
		exp sql.NullInt64
		who string
	)
	err := s.db.QueryRowContext(ctx, s.q.holderOf, key).Scan(&tok, &exp, &who)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, unavailable("acquire", key, err)
	}
	now := s.nowUS()
	if !tok.Valid || tok.String == token || !exp.Valid || exp.Int64 <= now {
		return nil, nil
	}
	var ahead int64
	if err := s.db.QueryRowContext(ctx, s.q.waiting, key, now).Scan(&ahead); err != nil {
		return nil, unavailable("acquire", key, err)
	}
	return &lease.HeldError{Key: key, TTL: time.Duration(exp.Int64-now) * time.Microsecond, Holder: who, Position: int(ahead)}, nil
}

func (v leases) Renew(ctx context.Context, key, token string, ttl time.Duration) (lease.Grant, error) {
	if err := leasedriver.Validate(key, token, ttl); err != nil {
		return lease.Grant{}, err
	}
	s := v.s
	ttlUS := micros(ttl)
	var (
		f      int64
		waited time.Duration
	)
	entered := time.Now()
	err := s.write(ctx, "renew", key, func(tx *sql.Tx, _ int64) error {
		var now int64
		waited, now = s.applyTime(entered)
		err := tx.QueryRowContext(ctx, s.q.renew, key, token, now, ttlUS).Scan(&f)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: sqlitestore: renew %q", lease.ErrNotHeld, key)
		}
		if err != nil {
			return unavailable("renew", key, err)
		}
		return nil
	})
	if err != nil {
		return lease.Grant{}, err
	}
	return lease.Grant{Fence: uint64(f), TTL: time.Duration(ttlUS)*time.Microsecond + waited}, nil
}

func (v leases) Release(ctx context.Context, key, token string) error {
	if err := leasedriver.ValidateKey(key); err != nil {
		return err
	}
	if err := leasedriver.ValidateToken(token); err != nil {
		return err
	}
	s := v.s
	var next sql.NullString // the first live waiter, to wake
	err := s.write(ctx, "release", key, func(tx *sql.Tx, now int64) error {
		res, err := tx.ExecContext(ctx, s.q.release, key, token, now)
		if err != nil {
			return unavailable("release", key, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return unavailable("release", key, err)
		}
		if n == 0 {
			return fmt.Errorf("%w: sqlitestore: release %q", lease.ErrNotHeld, key)
		}
		next = sql.NullString{}
		if err := tx.QueryRowContext(ctx, s.q.firstWaiter, key, now).Scan(&next); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return unavailable("release", key, err)
		}
		return nil
	})
	if err == nil {
		s.wakeWaiters(key, next.String)
	}
	return err
}

func (v leases) Inspect(ctx context.Context, key string) (lease.Info, error) {
	if err := leasedriver.ValidateKey(key); err != nil {
		return lease.Info{}, err
	}
	s := v.s
	now := s.nowUS()
	var (
		f      int64
		exp    sql.NullInt64
		hasTok bool
		who    string
	)
	err := s.db.QueryRowContext(ctx, s.q.inspect, key).Scan(&f, &exp, &hasTok, &who)
	if errors.Is(err, sql.ErrNoRows) {
		return lease.Info{Key: key}, nil
	}
	if err != nil {
		return lease.Info{}, unavailable("inspect", key, err)
	}
	info := lease.Info{Key: key, Fence: uint64(f)}
	if hasTok && exp.Valid && exp.Int64 > now {
		info.Held = true
		info.TTL = time.Duration(exp.Int64-now) * time.Microsecond
		info.Holder = who
	}
	return info, nil
}

// List returns the keys the store remembers that start with prefix and
// sort after after, in key order, at most limit of them (lease.Lister).
func (v leases) List(ctx context.Context, prefix, after string, limit int) ([]lease.Info, error) {
	if err := leasedriver.ValidateList(prefix, after, limit); err != nil {
		return nil, err
	}
	s := v.s
	now := s.nowUS()
	rows, err := s.db.QueryContext(ctx, `SELECT "key", fence, expires_us, token IS NOT NULL, coalesce(holder, '') FROM "`+s.q.prefix+`leases"
		WHERE substr("key", 1, length(?1)) = ?1 AND "key" > ?2 ORDER BY "key" LIMIT ?3`, prefix, after, limit)
	if err != nil {
		return nil, unavailable("list", prefix, err)
	}
	defer rows.Close()
	var out []lease.Info
	for rows.Next() {
		var (
			k      string
			f      int64
			exp    sql.NullInt64
			hasTok bool
			who    string
		)
		if err := rows.Scan(&k, &f, &exp, &hasTok, &who); err != nil {
			return nil, unavailable("list", prefix, err)
		}
		info := lease.Info{Key: k, Fence: uint64(f)}
		if hasTok && exp.Valid && exp.Int64 > now {
			info.Held, info.TTL, info.Holder = true, time.Duration(exp.Int64-now)*time.Microsecond, who
		}
		out = append(out, info)
	}
	if err := rows.Err(); err != nil {
		return nil, unavailable("list", prefix, err)
	}
	return out, nil
}
