package bench

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/jackc/pgx/v5"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/etcdstore"
	"github.com/tenurekit/tenure/store/memstore"
	"github.com/tenurekit/tenure/store/pgstore"
	"github.com/tenurekit/tenure/store/redisstore"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

// HandoffWorkers and HandoffHold are the contended hand-off's shape: this
// many workers on one key, each holding it this long.
const (
	HandoffWorkers = 20
	HandoffHold    = 2 * time.Millisecond
)

// lockerHandoff runs the hand-off on store through a lease.Locker, fair
// and unfair.
func lockerHandoff(b *testing.B, store lease.Store, key string) {
	for _, c := range []struct {
		name   string
		unfair bool
	}{{"tenure-fair", false}, {"tenure-unfair", true}} {
		b.Run(c.name, func(b *testing.B) {
			lk, err := lease.New(store, &lease.Options{Unfair: c.unfair})
			if err != nil {
				b.Fatal(err)
			}
			k := key + ":" + c.name
			runHandoff(b, HandoffWorkers, HandoffHold, lockerLock(lk, k))
		})
	}
}

// lockerLock is each worker's lock of key through lk: Acquire with a 10 s
// TTL, and the lease's Release.
func lockerLock(lk *lease.Locker, key string) func(int) lockFunc {
	return func(int) lockFunc {
		return func(ctx context.Context) (func() error, error) {
			l, err := lk.Acquire(ctx, key, 10*time.Second)
			if err != nil {
				return nil, err
			}
			return func() error { return l.Release(ctx) }, nil
		}
	}
}

// BenchmarkHandoffManyWaiters passes one key among 20, 200 and 1,000
// workers of one process on the memory store, each holding it 2 ms: what a
// hand-off costs as the waiters of a key in a process grow. A release
// wakes the waiter it hands to, not every waiter of the key, so the gap
// should grow little with their number.
//
//	go test -run '^$' -bench HandoffManyWaiters -benchtime 1500x
func BenchmarkHandoffManyWaiters(b *testing.B) {
	for _, w := range []int{HandoffWorkers, 200, 1000} {
		b.Run("workers="+strconv.Itoa(w), func(b *testing.B) {
			s, err := memstore.New(nil)
			if err != nil {
				b.Fatal(err)
			}
			lk, err := lease.New(s.Leases(), nil)
			if err != nil {
				b.Fatal(err)
			}
			runHandoff(b, w, HandoffHold, lockerLock(lk, "bench:handoff"))
		})
	}
}

// BenchmarkHandoffPostgres passes one key among 20 workers on one
// PostgreSQL: tenure fair (a table of waiters, woken by the release's
// NOTIFY), tenure unfair, three floors (notify-floor and notify-write: see
// notifyHandoff; queue-write: see queueWriteHandoff) and a session
// advisory lock (pg_advisory_lock, which waits inside the server on a
// connection held meanwhile, woken by the unlock: the fastest hand-off
// PostgreSQL has, with neither TTL nor fence).
//
//	go test -run '^$' -bench HandoffPostgres
func BenchmarkHandoffPostgres(b *testing.B) {
	p, err := env.Postgres()
	if err != nil {
		b.Fatal(err)
	}
	st, err := pgstore.New(p.pool, nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := st.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	lockerHandoff(b, st.Leases(), "bench:handoff")
	b.Run("notify-floor", func(b *testing.B) { notifyHandoff(b, p, notifyFloor) })
	if _, err := p.pool.Exec(context.Background(), notifyWriteTable); err != nil {
		b.Fatal(err)
	}
	b.Run("notify-write", func(b *testing.B) { notifyHandoff(b, p, notifyWrite) })
	b.Run("queue-write", func(b *testing.B) { queueWriteHandoff(b, p) })
	b.Run("advisory", func(b *testing.B) {
		runHandoff(b, HandoffWorkers, HandoffHold, func(int) lockFunc {
			return func(ctx context.Context) (func() error, error) {
				conn, err := p.pool.Acquire(ctx)
				if err != nil {
					return nil, err
				}
				if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended('bench:handoff:advisory', 0))`); err != nil {
					conn.Release()
					return nil, err
				}
				return func() error {
					defer conn.Release()
					_, err := conn.Exec(ctx, `SELECT pg_advisory_unlock(hashtextextended('bench:handoff:advisory', 0))`)
					return err
				}, nil
			}
		})
	})
}

// BenchmarkHandoffEtcd passes one key among 20 workers on one etcd:
// tenure fair (a waiter key per waiter, first by create revision, woken by
// a watch of the lock), tenure unfair, and etcd's concurrency.Mutex (each
// worker on a session of its own: the Mutex queues by revision and waits
// on a watch of the key ahead).
//
//	go test -run '^$' -bench HandoffEtcd
func BenchmarkHandoffEtcd(b *testing.B) {
	ec, err := env.Etcd()
	if err != nil {
		b.Fatal(err)
	}
	st, err := etcdstore.New(ec.client, &etcdstore.Options{Prefix: "bench/handoff/"})
	if err != nil {
		b.Fatal(err)
	}
	lockerHandoff(b, st.Leases(), "bench:handoff")
	b.Run("mutex", func(b *testing.B) {
		sessions := make([]*concurrency.Session, HandoffWorkers)
		for i := range sessions {
			sess, err := concurrency.NewSession(ec.client, concurrency.WithTTL(10))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { sess.Close() })
			sessions[i] = sess
		}
		runHandoff(b, HandoffWorkers, HandoffHold, func(w int) lockFunc {
			m := concurrency.NewMutex(sessions[w], "bench/handoff/mutex")
			return func(ctx context.Context) (func() error, error) {
				if err := m.Lock(ctx); err != nil {
					return nil, err
				}
				return func() error { return m.Unlock(ctx) }, nil
			}
		})
	})
}

// BenchmarkHandoffSQLite passes one key among 20 workers on one SQLite
// file (one process): tenure fair (a table of waiters, woken in process
// by the release) and unfair.
//
//	go test -run '^$' -bench HandoffSQLite
func BenchmarkHandoffSQLite(b *testing.B) {
	dir, err := os.MkdirTemp("", "tenure-bench-handoff-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	st, err := sqlitestore.Open(context.Background(), filepath.Join(dir, "tenure.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	lockerHandoff(b, st.Leases(), "bench:handoff")
}

// BenchmarkHandoffMemory passes one key among 20 workers on a memory
// store, fair (the default) and unfair (lease.Options.Unfair).
//
//	go test -run '^$' -bench HandoffMemory
func BenchmarkHandoffMemory(b *testing.B) {
	for _, c := range []struct {
		name   string
		unfair bool
	}{{"tenure-fair", false}, {"tenure-unfair", true}} {
		b.Run(c.name, func(b *testing.B) {
			s, err := memstore.New(nil)
			if err != nil {
				b.Fatal(err)
			}
			lk, err := lease.New(s.Leases(), &lease.Options{Unfair: c.unfair})
			if err != nil {
				b.Fatal(err)
			}
			runHandoff(b, HandoffWorkers, HandoffHold, lockerLock(lk, "bench:handoff"))
		})
	}
}

// BenchmarkHandoffRedis passes one key among 20 workers on one Redis:
// tenure fair (the default: a queue of waiters, woken by the release's
// publish), tenure unfair, and bsm/redislock retrying every 5ms (its
// linear backoff; it has no wake-up).
//
//	go test -run '^$' -bench HandoffRedis
func BenchmarkHandoffRedis(b *testing.B) {
	r, err := env.Redis()
	if err != nil {
		b.Fatal(err)
	}
	st, err := redisstore.New(r.rueidis, nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := st.Check(context.Background()); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		unfair bool
	}{{"tenure-fair", false}, {"tenure-unfair", true}} {
		b.Run(c.name, func(b *testing.B) {
			lk, err := lease.New(st.Leases(), &lease.Options{Unfair: c.unfair})
			if err != nil {
				b.Fatal(err)
			}
			key := "bench:handoff:" + c.name
			runHandoff(b, HandoffWorkers, HandoffHold, lockerLock(lk, key))
		})
	}
	b.Run("redislock", func(b *testing.B) {
		rl := redislock.New(r.goredis)
		retry := redislock.LinearBackoff(5 * time.Millisecond)
		runHandoff(b, HandoffWorkers, HandoffHold, func(int) lockFunc {
			return func(ctx context.Context) (func() error, error) {
				wctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				l, err := rl.Obtain(wctx, "bench:handoff:redislock", 10*time.Second, &redislock.Options{RetryStrategy: retry})
				if err != nil {
					return nil, err
				}
				return func() error { return l.Release(ctx) }, nil
			}
		})
	})
}

// BenchmarkHandoffServe passes one key among 20 workers through tenure
// serve (in process, on loopback) on Redis and on SQLite. "serve-wait" is
// the API's waiting acquire, one request per grant (POST /v1/leases/acquire
// with a wait): the server keeps the request's place in the store's queue
// and is woken by the release, as the library is, with no polling of the
// store per waiting request. "tenure-fair" and "tenure-unfair" are the
// library on the same store in the same run.
//
//	go test -run '^$' -bench HandoffServe -benchtime 1500x
func BenchmarkHandoffServe(b *testing.B) {
	for _, store := range []string{"redis", "sqlite"} {
		b.Run(store, func(b *testing.B) {
			s, err := env.serveStore(store)
			if err != nil {
				b.Fatal(err)
			}
			b.Run("serve-wait", func(b *testing.B) {
				key := "bench:handoff:serve-wait"
				runHandoff(b, HandoffWorkers, HandoffHold, func(int) lockFunc {
					return func(ctx context.Context) (func() error, error) {
						tok := lease.NewToken()
						if _, err := s.client.AcquireWait(ctx, key, tok, 10*time.Second, time.Minute/2); err != nil {
							return nil, err
						}
						return func() error { return s.leasesServe.Release(ctx, key, tok) }, nil
					}
				})
			})
			lockerHandoff(b, s.leases, "bench:handoff:serve-library")
		})
	}
}

// The statements a notifyHandoff release sends: notifyFloor only wakes
// the next worker; notifyWrite also records the new holder in a one-row
// table (notifyWriteTable), the one committed write a hand-off that keeps
// its holder in PostgreSQL cannot do without.
const (
	notifyFloor      = `SELECT pg_notify('bench_notify_floor', $1)`
	notifyWrite      = `WITH u AS (UPDATE bench_notify_write SET holder = $1, n = n + 1 RETURNING 1) SELECT pg_notify('bench_notify_floor', $1) FROM u`
	notifyWriteTable = `CREATE TABLE IF NOT EXISTS bench_notify_write (holder text NOT NULL, n bigint NOT NULL);
INSERT INTO bench_notify_write SELECT '', 0 WHERE NOT EXISTS (SELECT 1 FROM bench_notify_write)`
)

// listen LISTENs on channel on a connection of its own and hands each
// notification's payload to wake, until the returned stop is called.
func listen(b *testing.B, p *pgClients, channel string, wake func(payload string)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ln, err := pgx.Connect(ctx, p.dsn)
	if err != nil {
		cancel()
		b.Fatal(err)
	}
	if _, err := ln.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		cancel()
		ln.Close(context.Background())
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			n, err := ln.WaitForNotification(ctx)
			if err != nil {
				return
			}
			wake(n.Payload)
		}
	}()
	return func() {
		cancel()
		<-done
		ln.Close(context.Background())
	}
}

// notifyHandoff is the hand-off of a lock whose queue of waiters is in
// this process: a release sends release (one autocommit statement whose
// NOTIFY names the next worker), which a listening connection hands to
// that worker. It is not a lock a service could use (the queue dies with
// the process); it is the least a hand-off woken by NOTIFY can cost on
// this server: with notifyFloor, a lock that keeps nothing in PostgreSQL;
// with notifyWrite, one that records each new holder, as a lease with a
// TTL and a fence must. A lock that keeps its queue in the database pays
// that and its queue's statements besides.
func notifyHandoff(b *testing.B, p *pgClients, release string) {
	var (
		mu     sync.Mutex
		held   bool
		queue  []int
		failed = make(chan struct{}) // closed when a release fails
		fail   sync.Once
	)
	wake := make([]chan struct{}, HandoffWorkers)
	for i := range wake {
		wake[i] = make(chan struct{}, 1)
	}
	defer listen(b, p, "bench_notify_floor", func(payload string) {
		if w, err := strconv.Atoi(payload); err == nil && w >= 0 && w < len(wake) {
			wake[w] <- struct{}{}
		}
	})()
	runHandoff(b, HandoffWorkers, HandoffHold, func(w int) lockFunc {
		return func(ctx context.Context) (func() error, error) {
			mu.Lock()
			if !held {
				held = true
				mu.Unlock()
			} else {
				queue = append(queue, w)
				mu.Unlock()
				select {
				case <-wake[w]:
				case <-failed:
					return nil, errors.New("bench: a release failed; its waiter is never woken")
				}
			}
			return func() error {
				mu.Lock()
				if len(queue) == 0 {
					held = false
					mu.Unlock()
					return nil
				}
				next := queue[0]
				queue = queue[1:]
				mu.Unlock()
				if _, err := p.pool.Exec(ctx, release, strconv.Itoa(next)); err != nil {
					fail.Do(func() { close(failed) })
					return err
				}
				return nil
			}, nil
		}
	})
}

// The statements of queueWriteHandoff, on a one-row table
// (queueWriteTable) holding the key's holder token, fence, expiry and its
// queue of waiting tokens. queueWriteAcquire ($1 the token) takes the key
// when it is free or expired, and otherwise appends the token to the
// queue, in one upsert; it answers whether the token holds the key.
// queueWriteRelease ($1 the holder's token) grants the key to the first
// token of the queue (a new fence, a new expiry) and names it in a NOTIFY,
// or frees the key when the queue is empty, in one statement.
const (
	queueWriteTable = `CREATE TABLE IF NOT EXISTS bench_queue_write (key text PRIMARY KEY, token text,
	fence bigint NOT NULL DEFAULT 0, expires_at timestamptz, queue text[] NOT NULL DEFAULT '{}');
DELETE FROM bench_queue_write`
	queueWriteAcquire = `WITH c AS (SELECT clock_timestamp() AS now)
INSERT INTO bench_queue_write AS l (key, token, fence, expires_at) SELECT 'k', $1, 1, c.now + interval '10 seconds' FROM c
ON CONFLICT (key) DO UPDATE SET
	token = CASE WHEN l.token IS NULL OR l.expires_at <= (SELECT now FROM c) THEN excluded.token ELSE l.token END,
	fence = CASE WHEN l.token IS NULL OR l.expires_at <= (SELECT now FROM c) THEN l.fence + 1 ELSE l.fence END,
	expires_at = CASE WHEN l.token IS NULL OR l.expires_at <= (SELECT now FROM c) THEN excluded.expires_at ELSE l.expires_at END,
	queue = CASE WHEN l.token IS NULL OR l.expires_at <= (SELECT now FROM c) THEN l.queue ELSE array_append(l.queue, excluded.token) END
RETURNING l.token = $1`
	queueWriteRelease = `WITH c AS (SELECT clock_timestamp() AS now),
u AS (UPDATE bench_queue_write AS l SET token = l.queue[1], queue = l.queue[2:], fence = l.fence + 1,
	expires_at = c.now + interval '10 seconds' FROM c WHERE l.key = 'k' AND l.token = $1 RETURNING l.token)
SELECT count(*), count(CASE WHEN u.token IS NOT NULL THEN pg_notify('bench_queue_write', u.token) END) FROM u`
)

// queueWriteHandoff is the hand-off of a lock whose queue of waiters is
// kept in PostgreSQL, in the key's own row: a waiter that finds the key
// held writes its place there in the statement that found it held, and a
// release grants the key to the first place and wakes it (NOTIFY, which a
// listening connection hands to that waiter) in one statement. It is not
// a lock a service could use (a place never expires, a waiter's process
// is not checked, nothing is validated); it is the least a lock that keeps
// its queue in the database, as tenure's fair Locker does, can cost per
// hand-off on this server: notify-write's one committed write for the
// release, and a committed write for each waiter's place.
func queueWriteHandoff(b *testing.B, p *pgClients) {
	if _, err := p.pool.Exec(context.Background(), queueWriteTable); err != nil {
		b.Fatal(err)
	}
	var (
		mu   sync.Mutex
		wake = map[string]chan struct{}{} // by token, while it waits
		seq  int64
	)
	defer listen(b, p, "bench_queue_write", func(payload string) {
		mu.Lock()
		ch := wake[payload]
		mu.Unlock()
		if ch != nil {
			ch <- struct{}{}
		}
	})()
	runHandoff(b, HandoffWorkers, HandoffHold, func(w int) lockFunc {
		return func(ctx context.Context) (func() error, error) {
			ch := make(chan struct{}, 1)
			mu.Lock()
			seq++
			token := strconv.Itoa(w) + "-" + strconv.FormatInt(seq, 10)
			wake[token] = ch
			mu.Unlock()
			defer func() {
				mu.Lock()
				delete(wake, token)
				mu.Unlock()
			}()
			var held bool
			if err := p.pool.QueryRow(ctx, queueWriteAcquire, token).Scan(&held); err != nil {
				return nil, err
			}
			if !held {
				t := time.NewTimer(30 * time.Second)
				defer t.Stop()
				select {
				case <-ch:
				case <-t.C:
					return nil, errors.New("bench: a queued waiter was not woken within 30s")
				}
			}
			return func() error {
				var n, woke int64
				if err := p.pool.QueryRow(ctx, queueWriteRelease, token).Scan(&n, &woke); err != nil {
					return err
				}
				if n != 1 {
					return errors.New("bench: a release found the key not held by its token")
				}
				return nil
			}, nil
		}
	})
}
