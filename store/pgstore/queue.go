package pgstore

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	"database/sql"
	"database/sql/driver"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/tenurekit/tenure/internal/wakehub"
	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
)

// queueQueries are the statements of the waiters' queue
// (leasedriver.Queuer) and of the release that wakes them.
type queueQueries struct {
	acquire, leave, wake, release string
}

func buildQueueQueries(schema string) queueQueries {
	leases := schema + ".leases"
	waiters := schema + ".lease_waiters"
	seq := strings.ReplaceAll(schema, "'", "''") + ".lease_waiters_seq"
	floor := schema + ".lease_fence_floor"
	const clock = `WITH c AS (SELECT clock_timestamp() AS now)`
	// first is the first live waiter of key $1.
	first := `(SELECT w.waiter FROM ` + waiters + ` AS w, c WHERE w.key = $1 AND w.stay_until > c.now ORDER BY w.seq LIMIT 1)`
	free := `NOT EXISTS (SELECT 1 FROM ` + leases + ` AS l, c WHERE l.key = $1 AND l.token IS NOT NULL AND l.expires_at > c.now)`
	return queueQueries{
		// $1 key, $2 token, $3 ttl µs, $4 holder, $5 waiter, $6 stay µs;
		// for a hand-over (else NULL): $7 token, $8 attempt, $9 the
		// listening connection's lock (see listenLockClass).
		// The grant is the plain acquire's upsert, tried only when no
		// other live waiter is first (or the token holds the key
		// already); otherwise the waiter keeps its place (a place whose
		// stay ended is taken anew, at the back) and the answer says how
		// many live waiters are ahead. Only rows of the waiter itself and
		// the lease row are written, so two waiters never lock each
		// other's rows; places whose stay ended are left to Sweep.
		acquire: clock + `,
cur AS (SELECT l.token, l.expires_at, l.holder FROM ` + leases + ` AS l WHERE l.key = $1),
granted AS (
` + grantInsert(schema) + `
	WHERE coalesce(` + first + ` = $5, true)
		OR EXISTS (SELECT 1 FROM cur WHERE cur.token = $2 AND cur.expires_at > c.now)
` + grantConflict + `
	WHERE l.token IS NULL OR l.expires_at <= (SELECT now FROM c) OR l.token = excluded.token
	RETURNING l.fence),
gone AS (DELETE FROM ` + waiters + ` AS w WHERE w.key = $1 AND w.waiter = $5 AND EXISTS (SELECT 1 FROM granted)),
queued AS (
	INSERT INTO ` + waiters + ` AS w (key, waiter, seq, stay_until, token, holder, grant_until, attempt, listener)
	SELECT $1, $5, nextval('` + seq + `'), c.now + $6::bigint * interval '1 microsecond',
		$7::text, CASE WHEN $7::text IS NOT NULL THEN nullif($4::text, '') END,
		CASE WHEN $7::text IS NOT NULL THEN c.now + $3::bigint * interval '1 microsecond' END,
		$8::bigint, $9::integer FROM c
	WHERE NOT EXISTS (SELECT 1 FROM granted)
	ON CONFLICT (key, waiter) DO UPDATE SET
		seq = CASE WHEN w.stay_until > (SELECT now FROM c) THEN w.seq ELSE excluded.seq END,
		stay_until = excluded.stay_until,
		token = excluded.token, holder = excluded.holder, grant_until = excluded.grant_until,
		attempt = excluded.attempt, listener = excluded.listener
	RETURNING w.seq),
hint AS (UPDATE ` + leases + ` AS l SET waiters = true
	WHERE l.key = $1 AND NOT l.waiters AND NOT EXISTS (SELECT 1 FROM granted))
SELECT coalesce((SELECT fence FROM granted), 0),
	coalesce((SELECT CASE WHEN cur.token IS NOT NULL AND cur.token <> $2 AND cur.expires_at > c.now
		THEN ((extract(epoch FROM cur.expires_at) - extract(epoch FROM c.now)) * 1000000)::bigint END FROM cur), 0),
	coalesce((SELECT CASE WHEN cur.token IS NOT NULL AND cur.expires_at > c.now THEN cur.holder END FROM cur), ''),
	(SELECT count(*) FROM ` + waiters + ` AS w WHERE w.key = $1 AND w.stay_until > c.now AND w.waiter <> $5
		AND w.seq < coalesce((SELECT seq FROM queued), 0))
FROM c`,
		// $1 key, $2 waiter, $3 channel. A waiter that was first leaves
		// a free key to the next one, which is woken.
		leave: clock + `,
me AS (DELETE FROM ` + waiters + ` AS w WHERE w.key = $1 AND w.waiter = $2 RETURNING w.seq, w.stay_until)
SELECT count(*) FROM (SELECT pg_notify($3, coalesce((SELECT w.waiter FROM ` + waiters + ` AS w
		WHERE w.key = $1 AND w.waiter <> $2 AND w.stay_until > c.now ORDER BY w.seq LIMIT 1), '') || ' ' || $1) FROM c
	WHERE EXISTS (SELECT 1 FROM me WHERE me.stay_until > c.now)
	AND NOT EXISTS (SELECT 1 FROM ` + waiters + ` AS w WHERE w.key = $1 AND w.waiter <> $2 AND w.stay_until > c.now AND w.seq < (SELECT seq FROM me))
	AND ` + free + `) AS n`,
		// $1 key, $2 token, $3 channel, $4 the token's waiter: the
		// release of a key that has been contended lately (see
		// wakehub.Contended). When the first live waiter (other than the
		// releasing token's own place, left by an attempt that crossed a
		// hand-over, which goes) took a hand-over, its session still
		// listening and its grant still ahead, the key goes to it: a new
		// tenure, its fence above the last one, the floor and the clock,
		// until the end its attempt asked for; it leaves the queue and is
		// woken with the grant (lease/driver.GrantWake). Otherwise the
		// key is freed and the first live waiter is woken to take it.
		// Either wake-up is a NOTIFY, sent at commit. The waiters hint
		// is cleared when none is left.
		release: clock + `,
nx AS (SELECT w.waiter, w.token, w.holder, w.grant_until, w.attempt, w.listener
	FROM ` + waiters + ` AS w, c
	WHERE w.key = $1 AND w.waiter <> $4 AND w.stay_until > c.now ORDER BY w.seq LIMIT 1),
h AS (SELECT nx.waiter, nx.token, nx.holder, nx.grant_until, nx.attempt FROM nx, c
	WHERE nx.token IS NOT NULL AND nx.grant_until > c.now AND nx.listener IS NOT NULL
	AND NOT pg_try_advisory_xact_lock_shared(` + listenLockClass + `, nx.listener)),
r AS (UPDATE ` + leases + ` AS l SET token = h.token, holder = h.holder, expires_at = coalesce(h.grant_until, c.now),
		fence = CASE WHEN h.token IS NULL THEN l.fence
			ELSE greatest(l.fence + 1, (extract(epoch FROM c.now) * 1000000)::bigint,
				(SELECT ff.fence FROM ` + floor + ` AS ff) + 1) END,
		waiters = l.waiters AND EXISTS (SELECT 1 FROM nx)
	FROM c LEFT JOIN h ON true
	WHERE l.key = $1 AND l.token = $2 AND l.expires_at > c.now RETURNING l.fence),
gone AS (DELETE FROM ` + waiters + ` AS w WHERE w.key = $1 AND (w.waiter = $4 OR w.waiter = (SELECT waiter FROM h))
	AND EXISTS (SELECT 1 FROM r))
SELECT count(*), count(CASE WHEN h.waiter IS NOT NULL THEN pg_notify($3, h.waiter || '/' || r.fence || '/' || h.attempt || ' ' || $1)
		WHEN nx.waiter IS NOT NULL THEN pg_notify($3, nx.waiter || ' ' || $1) END)
FROM r LEFT JOIN nx ON true LEFT JOIN h ON true`,
		// $1 key, $2 channel: after a release that found the waiters
		// hint on, wake the first live waiter (NOTIFY, sent at commit),
		// or clear the hint when none is left.
		wake: clock + `,
nx AS (SELECT w.waiter FROM ` + waiters + ` AS w, c WHERE w.key = $1 AND w.stay_until > c.now ORDER BY w.seq LIMIT 1),
clr AS (UPDATE ` + leases + ` AS l SET waiters = false WHERE l.key = $1 AND l.waiters AND NOT EXISTS (SELECT 1 FROM nx))
SELECT count(pg_notify($2, nx.waiter || ' ' || $1)) FROM nx`,
	}
}

// wakeChannel is the NOTIFY channel of a schema's lease wake-ups: one per
// schema, of a fixed length whatever the schema's name.
func wakeChannel(schema string) string {
	sum := sha1.Sum([]byte(schema))
	return "tenure_wake_" + hex.EncodeToString(sum[:8])
}

// AcquireQueued is AcquireHolder for a waiter that keeps its place in
// key's queue for stay (leasedriver.Queuer): a free key goes to the first
// live waiter, never to a newcomer. One statement.
func (v leases) AcquireQueued(ctx context.Context, key, token string, ttl time.Duration, holder string, stay time.Duration) (lease.Grant, error) {
	return v.acquireQueued(ctx, key, token, ttl, holder, stay, 0)
}

// AcquireHandover is AcquireQueued for a waiter that watches key
// (leasedriver.Handover): while the store's listening connection is up,
// the waiter's place carries its token and the key of the advisory lock
// that connection holds (listenLockClass), and a release that finds the
// waiter first hands the key to it while that lock is held. A process
// that ended has closed the connection, and is woken instead, as are the
// waiters of a store that is not listening now.
// A waiter on a machine that vanished without closing its connection may
// still be handed the key within its stay, which then waits for its
// lease to expire, as a lease granted just before the machine vanished
// would.
func (v leases) AcquireHandover(ctx context.Context, key, token string, ttl time.Duration, holder string, stay time.Duration, attempt uint64) (lease.Grant, error) {
	if attempt == 0 {
		return lease.Grant{}, fmt.Errorf("%w: hand-over attempt 0 (they are numbered from 1)", lease.ErrInvalid)
	}
	return v.acquireQueued(ctx, key, token, ttl, holder, stay, attempt)
}

// acquireQueued is AcquireQueued, with a hand-over when attempt is not 0
// and the store listens.
func (v leases) acquireQueued(ctx context.Context, key, token string, ttl time.Duration, holder string, stay time.Duration, attempt uint64) (lease.Grant, error) {
	s := v.s
	if err := s.validate(key, token, ttl); err != nil {
		return lease.Grant{}, err
	}
	if err := pgHolder(holder); err != nil {
		return lease.Grant{}, err
	}
	if err := leasedriver.ValidateStay(stay); err != nil {
		return lease.Grant{}, err
	}
	ttl = grantTTL(ttl)
	var (
		f, rem, ahead int64
		who           string
	)
	args := []any{key, token, ttl, holder, leasedriver.WaiterID(token), stay, nil, nil, nil}
	if attempt != 0 {
		if id, ok := s.wakes.backend(); ok {
			args[6], args[7], args[8] = token, int64(attempt), id
		}
	}
	err := s.grantRow(ctx, s.qq.acquire, args, &f, &rem, &who, &ahead)
	if err != nil {
		return lease.Grant{}, s.wrap(ctx, fmt.Sprintf("acquire %q", key), err)
	}
	if f == 0 {
		s.hot.Mark(key)
	}
	switch {
	case f > 0:
		return lease.Grant{Fence: uint64(f), TTL: ttl}, nil
	case rem > 0:
		return lease.Grant{}, &lease.HeldError{Key: key, TTL: time.Duration(rem) * time.Microsecond, Holder: who, Position: int(ahead)}
	case ahead > 0:
		return lease.Grant{}, &lease.HeldError{Key: key, Position: int(ahead)} // free, promised to a waiter ahead
	}
	// Free when read, taken when written: a key changing hands.
	return lease.Grant{}, &lease.HeldError{Key: key, TTL: time.Microsecond}
}

// Leave gives token's place in key's queue up (leasedriver.Queuer). A
// waiter that was first leaves a free key to the next one, which is woken.
func (v leases) Leave(ctx context.Context, key, token string) error {
	s := v.s
	if err := leasedriver.ValidateKey(key); err != nil {
		return err
	}
	if err := pgToken(token); err != nil {
		return err
	}
	var n int64
	if err := s.db.queryRow(ctx, s.qq.leave, []any{key, leasedriver.WaiterID(token), s.wakeCh}, &n); err != nil {
		return s.wrap(ctx, fmt.Sprintf("leave the queue of %q", key), err)
	}
	return nil
}

// Watch returns a channel that receives when key is released or the
// waiter first in its queue leaves (leasedriver.Waker), naming the waiter
// that is first now. The wake-ups travel by LISTEN/NOTIFY on a connection
// of the store's own, opened with the first watch and closed a while after
// the last one stopped: with a pgx pool ([New]) a new connection made from
// the pool's configuration, with a database/sql database ([NewDB]) on
// pgx's driver one of the database's connections, discarded afterwards.
// On another driver (lib/pq) Watch fails with an error wrapping
// errors.ErrUnsupported and waiters poll, still in arrival order, as they
// do when the connection cannot be made. An
// expiry sends nothing: a waiter polls at the holder's remaining TTL.
//
// A connection pooler in transaction mode (PgBouncer's pool_mode =
// transaction) does not deliver notifications to a listener: point the
// store at PostgreSQL itself, or at a session-mode pool, for wake-ups;
// through a transaction-mode pool waiters are still served in order, at
// the pace of their polling.
func (v leases) Watch(ctx context.Context, key, waiter string) (<-chan string, func(), error) {
	if err := leasedriver.ValidateKey(key); err != nil {
		return nil, nil, err
	}
	return v.s.wakes.watch(ctx, key, waiter)
}

// wakeLinger is how long the listening connection stays open after its
// last watcher stopped, for the next wait (a contended key's waiters watch
// it again with each acquire).
const wakeLinger = 2 * time.Second

// listener receives a schema's wake-ups on one connection and hands them
// to the store's watchers.
type listener struct {
	channel string
	// session runs fn on a connection of the store's own for listening,
	// and closes it (it is never reused) when fn returns; nil when the
	// store has none.
	session func(ctx context.Context, fn func(c *pgx.Conn) error) error

	hub    wakehub.Hub
	mu     sync.Mutex
	run    *listenRun // the running listener, nil when none
	linger *time.Timer
	// id is the key of the listening connection's advisory lock while
	// it listens (0 otherwise): a waiter's place names it for a
	// hand-over.
	id int32
}

// listenLockClass is the first key of the session advisory lock each
// listening connection holds while it is connected: (listenLockClass, id)
// with id random and not 0. A release hands a key over only to a waiter
// whose listener's lock is held (pg_try_advisory_xact_lock_shared fails):
// the connection of a process that ended is closed, and its lock gone.
// Taken with pg_try_advisory_lock(int, int), it shares PostgreSQL's
// advisory locks with the application's: an application's lock on the
// two-key form with this first key would read as a listener.
const listenLockClass = "1952804469" // "tenu"

// backend returns the key of the listening connection's lock.
func (l *listener) backend() (id int32, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.id, l.id != 0
}

// setBackend records the listening connection's lock (0: none).
func (l *listener) setBackend(id int32) {
	l.mu.Lock()
	l.id = id
	l.mu.Unlock()
}

// listenRun is one run of the listening loop.
type listenRun struct {
	ready  chan struct{} // closed once listening, or failed (err)
	err    error
	cancel context.CancelFunc
}

// poolSession opens listening connections from a pool's configuration.
func poolSession(pool *pgxpool.Pool) func(ctx context.Context, fn func(c *pgx.Conn) error) error {
	return func(ctx context.Context, fn func(c *pgx.Conn) error) error {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		c, err := pgx.ConnectConfig(dctx, pool.Config().ConnConfig.Copy())
		cancel()
		if err != nil {
			return err
		}
		defer func() {
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			c.Close(cctx)
		}()
		return fn(c)
	}
}

// errNoListen reports a database/sql driver other than pgx's: the store
// cannot listen on its connections.
var errNoListen = fmt.Errorf("pgstore: wake-ups need a pgx pool or pgx's database/sql driver (waiters poll): %w", errors.ErrUnsupported)

// dbSession takes one of db's connections for listening, when its driver
// is pgx's; the connection is discarded afterwards, not handed back.
func dbSession(db *sql.DB) func(ctx context.Context, fn func(c *pgx.Conn) error) error {
	return func(ctx context.Context, fn func(c *pgx.Conn) error) error {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		sc, err := db.Conn(dctx)
		cancel()
		if err != nil {
			return err
		}
		defer sc.Close()
		var ferr error
		err = sc.Raw(func(dc any) error {
			p, ok := dc.(*stdlib.Conn)
			if !ok {
				return errNoListen
			}
			ferr = fn(p.Conn())
			return driver.ErrBadConn // left in LISTEN: never reused
		})
		if errors.Is(err, errNoListen) {
			return err
		}
		return ferr
	}
}

// watch returns a channel for key's wake-ups for waiter (see
// wakehub.Set) once the listener listens.
func (l *listener) watch(ctx context.Context, key, waiter string) (<-chan string, func(), error) {
	if l.session == nil {
		return nil, nil, errNoListen
	}
	ch, stop := l.hub.Watch(key, waiter)
	l.mu.Lock()
	if l.linger != nil {
		l.linger.Stop()
		l.linger = nil
	}
	r := l.run
	if r == nil {
		rctx, cancel := context.WithCancel(context.Background())
		r = &listenRun{ready: make(chan struct{}), cancel: cancel}
		l.run = r
		go l.loop(rctx, r)
	}
	l.mu.Unlock()
	select {
	case <-r.ready:
	case <-ctx.Done():
		l.unwatch(stop)
		return nil, nil, ctx.Err()
	}
	if r.err != nil {
		l.unwatch(stop)
		return nil, nil, r.err
	}
	return ch, func() { l.unwatch(stop) }, nil
}

// unwatch stops a watcher; the listener stops wakeLinger after its last
// watcher, unless another one came meanwhile.
func (l *listener) unwatch(stop func()) {
	stop()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.hub.Watchers() > 0 || l.run == nil || l.linger != nil {
		return
	}
	r := l.run
	l.linger = time.AfterFunc(wakeLinger, func() {
		l.mu.Lock()
		if l.hub.Watchers() > 0 || l.run != r {
			l.mu.Unlock()
			return
		}
		l.run, l.linger = nil, nil
		l.mu.Unlock()
		r.cancel()
	})
}

// loop listens until ctx ends. A connection that fails is made again
// while there are watchers; after a reconnection every watcher is woken,
// since a wake-up may have been missed meanwhile.
func (l *listener) loop(ctx context.Context, r *listenRun) {
	first := true
	for backoff := 50 * time.Millisecond; ; {
		listening := false
		err := l.session(ctx, func(c *pgx.Conn) error {
			if _, err := c.Exec(ctx, "LISTEN "+pgx.Identifier{l.channel}.Sanitize()); err != nil {
				return fmt.Errorf("pgstore: LISTEN for wake-ups: %w", err)
			}
			// The lock tells the releases that this connection (and the
			// waiters of its process) live. Without it the store's
			// waiters are woken, not handed keys.
			for range 3 {
				id := randomLockID()
				var locked bool
				if id == 0 || c.QueryRow(ctx, `SELECT pg_try_advisory_lock(`+listenLockClass+`, $1)`, id).Scan(&locked) != nil {
					break
				}
				if locked {
					l.setBackend(id)
					defer l.setBackend(0)
					break
				}
			}
			listening = true
			if first {
				first = false
				close(r.ready)
			} else {
				l.hub.WakeAll("")
			}
			backoff = 50 * time.Millisecond
			for {
				n, err := c.WaitForNotification(ctx)
				if err != nil {
					return err
				}
				who, key, ok := strings.Cut(n.Payload, " ")
				if ok && n.Channel == l.channel {
					l.hub.Wake(key, who)
				}
			}
		})
		if first && !listening {
			// The first connection failed: the watchers poll, and the
			// next watch tries again.
			r.err = fmt.Errorf("pgstore: listen for wake-ups: %w", err)
			l.mu.Lock()
			if l.run == r {
				l.run = nil
			}
			l.mu.Unlock()
			close(r.ready)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
			backoff = min(2*backoff, 2*time.Second)
		}
	}
}

// randomLockID is a random non-zero key for a listener's lock (0 when
// the system's randomness fails).
func randomLockID() int32 {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return 0
	}
	id := int32(binary.BigEndian.Uint32(b[:]))
	if id == 0 {
		id = 1
	}
	return id
}
