package pgstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
)

// Leases returns the Store's lease.Store view. Each of its calls is one
// SQL statement judged on the server's clock_timestamp().
func (s *Store) Leases() lease.Store { return leases{s} }

type leases struct{ s *Store }

// The lease view queues its waiters, wakes them and hands keys over.
var (
	_ leasedriver.Queuer   = leases{}
	_ leasedriver.Waker    = leases{}
	_ leasedriver.Handover = leases{}
)

// heldAttempts bounds how often Acquire retries when the key was busy at
// the acquire but free again when the holder's TTL was read.
const heldAttempts = 3

// floorRecheckAttempts bounds how often a grant is made again after the
// fence-floor check refused the row it inserted (see grantRow).
const floorRecheckAttempts = 8

// grantRow runs a grant statement (one that may insert a lease row) and
// scans its row into dest. The schema's check of inserted lease rows
// (migration 7) refuses, with serialization_failure, a row whose fence is
// not above the fence floor as committed once the row is in: the grant
// read the floor before a sweep raised it and deleted the key's row. The
// statement wrote nothing, so it is run again; the new statement reads
// the raised floor. Other errors, and sql.ErrNoRows, are returned as
// they are.
func (s *Store) grantRow(ctx context.Context, stmt string, args []any, dest ...any) error {
	for attempt := 1; ; attempt++ {
		err := s.db.queryRow(ctx, stmt, args, dest...)
		if err == nil || sqlState(err) != "40001" || attempt >= floorRecheckAttempts || ctx.Err() != nil {
			return err
		}
	}
}

// pgToken checks what leasedriver.ValidateToken leaves to the store: PostgreSQL
// text holds valid UTF-8 without NUL only. The error never contains the
// token.
func pgToken(token string) error {
	if err := leasedriver.ValidateToken(token); err != nil {
		return err
	}
	if !utf8.ValidString(token) {
		return fmt.Errorf("%w: token is not valid UTF-8", lease.ErrInvalid)
	}
	for i := 0; i < len(token); i++ {
		if token[i] == 0 {
			return fmt.Errorf("%w: token contains NUL", lease.ErrInvalid)
		}
	}
	return nil
}

func (s *Store) validate(key, token string, ttl time.Duration) error {
	if err := leasedriver.Validate(key, token, ttl); err != nil {
		return err
	}
	return pgToken(token)
}

// grantTTL rounds ttl up to PostgreSQL's microsecond resolution, so the
// store never grants less than was asked for.
func grantTTL(ttl time.Duration) time.Duration {
	return (ttl + time.Microsecond - 1) / time.Microsecond * time.Microsecond
}

func (v leases) Acquire(ctx context.Context, key, token string, ttl time.Duration) (lease.Grant, error) {
	return v.AcquireHolder(ctx, key, token, ttl, "")
}

// AcquireHolder is Acquire that keeps holder with the grant
// (leasedriver.HolderAcquirer), in the leases.holder column.
func (v leases) AcquireHolder(ctx context.Context, key, token string, ttl time.Duration, holder string) (lease.Grant, error) {
	s := v.s
	if err := s.validate(key, token, ttl); err != nil {
		return lease.Grant{}, err
	}
	if err := pgHolder(holder); err != nil {
		return lease.Grant{}, err
	}
	ttl = grantTTL(ttl)
	stmt := s.q.acquire
	for attempt := 1; ; attempt++ {
		var f int64
		err := s.grantRow(ctx, stmt, []any{key, token, ttl, holder}, &f)
		if err == nil {
			return lease.Grant{Fence: uint64(f), TTL: ttl}, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return lease.Grant{}, s.wrap(ctx, fmt.Sprintf("acquire %q", key), err)
		}
		// Another token holds key, or waiters queued for it. The holder's
		// remaining time is read in a second statement; if the holder
		// released or expired in between, try again.
		var rem, ahead int64
		var who string
		err = s.db.queryRow(ctx, s.q.refused, []any{key}, &rem, &who, &ahead)
		if err != nil {
			return lease.Grant{}, s.wrap(ctx, fmt.Sprintf("acquire %q: read holder", key), err)
		}
		if rem > 0 || ahead > 0 {
			s.hot.Mark(key)
		}
		if rem > 0 {
			return lease.Grant{}, &lease.HeldError{Key: key, TTL: time.Duration(rem) * time.Microsecond, Holder: who, Position: int(ahead)}
		}
		if ahead > 0 {
			return lease.Grant{}, &lease.HeldError{Key: key, Position: int(ahead)} // free, promised to a waiter
		}
		// Free, and nobody waits: the row's waiters hint is stale (or the
		// key changed hands meanwhile). Ask the queue in the acquire.
		stmt = s.q.acquireChecked
		if attempt >= heldAttempts {
			// Held at every acquire, free at every read: a busy key
			// changing hands. Report it held, for the shortest time.
			return lease.Grant{}, &lease.HeldError{Key: key, TTL: time.Microsecond}
		}
	}
}

func (v leases) Renew(ctx context.Context, key, token string, ttl time.Duration) (lease.Grant, error) {
	s := v.s
	if err := s.validate(key, token, ttl); err != nil {
		return lease.Grant{}, err
	}
	ttl = grantTTL(ttl)
	var f int64
	err := s.db.queryRow(ctx, s.q.renew, []any{key, token, ttl}, &f)
	switch {
	case err == nil:
		return lease.Grant{Fence: uint64(f), TTL: ttl}, nil
	case errors.Is(err, sql.ErrNoRows):
		return lease.Grant{}, fmt.Errorf("pgstore: renew %q: %w", key, lease.ErrNotHeld)
	}
	return lease.Grant{}, s.wrap(ctx, fmt.Sprintf("renew %q", key), err)
}

func (v leases) Release(ctx context.Context, key, token string) error {
	s := v.s
	if err := leasedriver.ValidateKey(key); err != nil {
		return err
	}
	if err := pgToken(token); err != nil {
		return err
	}
	if s.hot.Is(key) {
		var n, woke int64
		if err := s.db.queryRow(ctx, s.qq.release, []any{key, token, s.wakeCh, leasedriver.WaiterID(token)}, &n, &woke); err != nil {
			return s.wrap(ctx, fmt.Sprintf("release %q", key), err)
		}
		if n == 0 {
			return fmt.Errorf("pgstore: release %q: %w", key, lease.ErrNotHeld)
		}
		return nil
	}
	var waiters bool
	err := s.db.queryRow(ctx, s.q.release, []any{key, token}, &waiters)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("pgstore: release %q: %w", key, lease.ErrNotHeld)
	}
	if err != nil {
		return s.wrap(ctx, fmt.Sprintf("release %q", key), err)
	}
	if waiters {
		// Released: a failed wake-up is made good by the waiters'
		// polling.
		s.hot.Mark(key)
		var n int64
		_ = s.db.queryRow(ctx, s.qq.wake, []any{key, s.wakeCh}, &n)
	}
	return nil
}

func (v leases) Inspect(ctx context.Context, key string) (lease.Info, error) {
	s := v.s
	if err := leasedriver.ValidateKey(key); err != nil {
		return lease.Info{}, err
	}
	var f, rem int64
	var who string
	err := s.db.queryRow(ctx, s.q.inspect, []any{key}, &f, &rem, &who)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return lease.Info{Key: key}, nil
	case err != nil:
		return lease.Info{}, s.wrap(ctx, fmt.Sprintf("inspect %q", key), err)
	}
	info := lease.Info{Key: key, Fence: uint64(f)}
	if rem > 0 {
		info.Held = true
		info.TTL = time.Duration(rem) * time.Microsecond
		info.Holder = who
	}
	return info, nil
}

// pgHolder checks a holder description (leasedriver.ValidateHolder; printable
// UTF-8 has no NUL, which PostgreSQL text could not hold).
func pgHolder(holder string) error { return leasedriver.ValidateHolder(holder) }

// List returns the keys the store remembers that start with prefix and
// sort after after (byte order), in key order, at most limit of them, with
// the current holder's description (lease.Lister). It reads one page of
// the leases table on the server's clock.
func (v leases) List(ctx context.Context, prefix, after string, limit int) ([]lease.Info, error) {
	if err := leasedriver.ValidateList(prefix, after, limit); err != nil {
		return nil, err
	}
	s := v.s
	for _, p := range []string{prefix, after} {
		if !utf8.ValidString(p) || strings.IndexByte(p, 0) >= 0 {
			return nil, fmt.Errorf("%w: list prefix or start is not valid UTF-8 without NUL", lease.ErrInvalid)
		}
	}
	var out []lease.Info
	err := s.db.query(ctx, s.q.list, []any{prefix, after, limit}, func(scan func(dest ...any) error) error {
		var (
			k      string
			f, rem int64
			who    string
		)
		if err := scan(&k, &f, &rem, &who); err != nil {
			return err
		}
		info := lease.Info{Key: k, Fence: uint64(f)}
		if rem > 0 {
			info.Held, info.TTL, info.Holder = true, time.Duration(rem)*time.Microsecond, who
		}
		out = append(out, info)
		return nil
	})
	if err != nil {
		return nil, s.wrap(ctx, fmt.Sprintf("list %q", prefix), err)
	}
	return out, nil
}
