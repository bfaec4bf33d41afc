package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
	"github.com/tenurekit/tenure/retention"
	"github.com/tenurekit/tenure/store/pgstore"
)

// floorFence reads the fence floor.
func floorFence(t *testing.T, pool *pgxpool.Pool) uint64 {
	t.Helper()
	var f int64
	if err := pool.QueryRow(ctxT(t), `SELECT fence FROM tenure.lease_fence_floor`).Scan(&f); err != nil {
		t.Fatal(err)
	}
	return uint64(f)
}

// leaseKeys lists the keys of the lease rows.
func leaseKeys(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(ctxT(t), `SELECT key FROM tenure.leases ORDER BY key COLLATE "C"`)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// sweepAll sweeps with o until the sweep has come round, and returns the
// lease rows it deleted.
func sweepAll(t *testing.T, db *pgstore.Store, o retention.Options) int {
	t.Helper()
	swept := 0
	for calls := 0; ; calls++ {
		r, err := db.Sweep(ctxT(t), o)
		if err != nil {
			t.Fatal(err)
		}
		if o.Limit > 0 && r.Deleted[retention.Leases] > o.Limit {
			t.Fatalf("one call deleted %d lease rows, more than its limit %d", r.Deleted[retention.Leases], o.Limit)
		}
		swept += r.Deleted[retention.Leases]
		if !r.More {
			return swept
		}
		if calls > 50 {
			t.Fatal("Sweep does not come round")
		}
	}
}

// 3,000 per-order keys acquired and released leave no rows once they
// ended (with the default retention, at once); held keys, and keys ended
// for less than a retention that is asked for, stay. A row whose fence is
// far above the clock goes too, and the fence floor keeps every later
// fence above it.
func TestSweepLeases(t *testing.T) {
	pool, db := fresh(t, nil)
	ctx := ctxT(t)
	ls := db.Leases()
	const n = 3000
	var lastFence uint64
	for i := range n {
		tok := lease.NewToken()
		g, err := ls.Acquire(ctx, fmt.Sprintf("order/%05d", i), tok, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		lastFence = g.Fence
		if err := ls.Release(ctx, fmt.Sprintf("order/%05d", i), tok); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ls.Acquire(ctx, "order/held", lease.NewToken(), time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := ls.Acquire(ctx, "order/expired", lease.NewToken(), time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// Ended 30 days ago, with a fence a day ahead of the clock (granted
	// while the clock ran ahead).
	ahead := uint64(time.Now().Add(24 * time.Hour).UnixMicro())
	if _, err := pool.Exec(ctx, `INSERT INTO tenure.leases (key, token, fence, expires_at) VALUES ('order/ahead', NULL, $1, clock_timestamp() - interval '30 days')`, int64(ahead)); err != nil {
		t.Fatal(err)
	}
	if f := floorFence(t, pool); f != 0 {
		t.Fatalf("fence floor %d before any sweep, want 0", f)
	}
	// Within a retention of an hour only the row that ended 30 days ago
	// goes, and the floor is raised to its fence.
	if swept := sweepAll(t, db, retention.Options{FenceRetention: time.Hour}); swept != 1 {
		t.Fatalf("Sweep with an hour's retention deleted %d lease rows, want 1 (order/ahead)", swept)
	}
	if f := floorFence(t, pool); f != ahead {
		t.Fatalf("fence floor %d after order/ahead was swept, want its fence %d", f, ahead)
	}
	if info, err := ls.Inspect(ctx, "order/ahead"); err != nil || info.Held || info.Fence != 0 {
		t.Fatalf("Inspect of a swept key: %+v, %v; want free with fence 0", info, err)
	}
	// Any key's next grant is above the floor, far ahead of the clock.
	g, err := ls.Acquire(ctx, "order/new", lease.NewToken(), time.Hour)
	if err != nil || g.Fence != ahead+1 {
		t.Fatalf("fence of a new key after the sweep: %d, %v; want %d", g.Fence, err, ahead+1)
	}
	// With the default retention the released and the expired rows go,
	// o.Limit per call.
	time.Sleep(5 * time.Millisecond)
	if swept := sweepAll(t, db, retention.Options{Limit: 500}); swept != n+1 {
		t.Fatalf("swept %d lease rows, want %d (the released and the expired)", swept, n+1)
	}
	if left := leaseKeys(t, pool); fmt.Sprint(left) != "[order/held order/new]" {
		t.Fatalf("rows left %v, want the held ones", left)
	}
	if f := floorFence(t, pool); f != ahead {
		t.Fatalf("fence floor %d after sweeping rows below it, want it unchanged at %d", f, ahead)
	}
	if info, err := ls.Inspect(ctx, "order/held"); err != nil || !info.Held {
		t.Fatalf("held key after Sweep: %+v, %v", info, err)
	}
	page, err := ls.(lease.Lister).List(ctx, "order/", "", 10)
	if err != nil || len(page) != 2 || page[0].Key != "order/held" || page[1].Key != "order/new" {
		t.Fatalf("List after Sweep: %+v, %v; want the held keys only", page, err)
	}
	g, err = ls.Acquire(ctx, fmt.Sprintf("order/%05d", n-1), lease.NewToken(), time.Minute)
	if err != nil || g.Fence <= lastFence || g.Fence <= ahead {
		t.Fatalf("fence after the row was swept: %d, %v; want above %d and the floor %d", g.Fence, err, lastFence, ahead)
	}
}

// The floor never goes down: a sweep that drops rows whose fences are
// below the floor leaves it where it is, and the key of the highest
// dropped fence is still granted above it.
func TestSweepFenceFloorNeverLowers(t *testing.T) {
	pool, db := fresh(t, nil)
	ctx := ctxT(t)
	high := uint64(time.Now().Add(time.Hour).UnixMicro())
	if _, err := pool.Exec(ctx, `INSERT INTO tenure.leases (key, token, fence, expires_at) VALUES
		('a', NULL, $1, clock_timestamp() - interval '1 second')`, int64(high)); err != nil {
		t.Fatal(err)
	}
	if swept := sweepAll(t, db, retention.Options{}); swept != 1 || floorFence(t, pool) != high {
		t.Fatalf("first sweep: %d rows, floor %d; want 1 and %d", swept, floorFence(t, pool), high)
	}
	// A row with a lower fence (restored from a backup, say) ends up
	// swept after it.
	if _, err := pool.Exec(ctx, `INSERT INTO tenure.leases (key, token, fence, expires_at) VALUES
		('b', NULL, 5, clock_timestamp() - interval '1 second')`); err != nil {
		t.Fatal(err)
	}
	if swept := sweepAll(t, db, retention.Options{}); swept != 1 {
		t.Fatalf("second sweep deleted %d rows, want 1", swept)
	}
	if f := floorFence(t, pool); f != high {
		t.Fatalf("fence floor %d after sweeping a row with fence 5, want it kept at %d", f, high)
	}
	if g, err := db.Leases().Acquire(ctx, "a", lease.NewToken(), time.Minute); err != nil || g.Fence <= high {
		t.Fatalf("fence of a after both sweeps: %d, %v; want above %d", g.Fence, err, high)
	}
}

// Acquire, renew, release and the queue never write the fence floor (only
// Sweep does), so grants of different keys never wait on it.
func TestGrantsDoNotWriteFenceFloor(t *testing.T) {
	pool, db := fresh(t, nil)
	ctx := ctxT(t)
	version := func() string {
		var v string
		if err := pool.QueryRow(ctx, `SELECT xmin::text || ctid::text FROM tenure.lease_fence_floor`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := version()
	ls := db.Leases()
	q := ls.(leasedriver.Queuer)
	for i := range 20 {
		k := fmt.Sprintf("k%d", i%5)
		tok := lease.NewToken()
		if _, err := ls.Acquire(ctx, k, tok, time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := ls.Renew(ctx, k, tok, time.Minute); err != nil {
			t.Fatal(err)
		}
		waiter := lease.NewToken()
		if _, err := q.AcquireQueued(ctx, k, waiter, time.Minute, "", time.Minute); !errors.Is(err, lease.ErrHeld) {
			t.Fatalf("queued acquire of a held key: %v", err)
		}
		if err := q.Leave(ctx, k, waiter); err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx, k, tok); err != nil {
			t.Fatal(err)
		}
	}
	if after := version(); after != before {
		t.Fatalf("the fence floor's row changed (%s, was %s) without a sweep", after, before)
	}
}

// A row locked by a caller's transaction (CheckHolder locks the lease row
// FOR UPDATE, and the lease may expire while the transaction is open) is
// skipped, not waited for; the next sweep drops it.
func TestSweepSkipsLockedRows(t *testing.T) {
	pool, db := fresh(t, nil)
	ctx := ctxT(t)
	if _, err := pool.Exec(ctx, `INSERT INTO tenure.leases (key, token, fence, expires_at) VALUES
		('locked', 'tok', 7, clock_timestamp() - interval '1 second'), ('other', NULL, 8, clock_timestamp() - interval '1 second')`); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM tenure.leases WHERE key = 'locked' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := db.Sweep(short, retention.Options{})
	if err != nil {
		t.Fatalf("Sweep while a row is locked: %v", err)
	}
	if r.Deleted[retention.Leases] != 1 || fmt.Sprint(leaseKeys(t, pool)) != "[locked]" {
		t.Fatalf("Sweep while a row is locked: %+v, rows %v; want only the unlocked one deleted", r, leaseKeys(t, pool))
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if swept := sweepAll(t, db, retention.Options{}); swept != 1 || len(leaseKeys(t, pool)) != 0 {
		t.Fatalf("Sweep after the transaction ended: %d rows, left %v", swept, leaseKeys(t, pool))
	}
}

// A free key with a live waiter queued keeps its row (its waiters hint
// keeps a newcomer's plain acquire from taking the key first); once the
// waiter has left, the row goes.
func TestSweepKeepsKeysWithWaiters(t *testing.T) {
	pool, db := fresh(t, nil)
	ctx := ctxT(t)
	ls := db.Leases()
	q := ls.(leasedriver.Queuer)
	holder, waiter := lease.NewToken(), lease.NewToken()
	if _, err := ls.Acquire(ctx, "k", holder, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := q.AcquireQueued(ctx, "k", waiter, time.Minute, "", time.Minute); !errors.Is(err, lease.ErrHeld) {
		t.Fatalf("queued acquire of a held key: %v", err)
	}
	if err := ls.Release(ctx, "k", holder); err != nil {
		t.Fatal(err)
	}
	if swept := sweepAll(t, db, retention.Options{}); swept != 0 || fmt.Sprint(leaseKeys(t, pool)) != "[k]" {
		t.Fatalf("Sweep of a free key with a waiter: %d rows, left %v; want the row kept", swept, leaseKeys(t, pool))
	}
	var held *lease.HeldError
	if _, err := ls.Acquire(ctx, "k", lease.NewToken(), time.Minute); !errors.As(err, &held) || held.Position != 1 {
		t.Fatalf("a newcomer's acquire after the sweep: %v; want refused, one waiter ahead", err)
	}
	if err := q.Leave(ctx, "k", waiter); err != nil {
		t.Fatal(err)
	}
	if swept := sweepAll(t, db, retention.Options{}); swept != 1 || len(leaseKeys(t, pool)) != 0 {
		t.Fatalf("Sweep after the waiter left: %d rows, left %v; want none", swept, leaseKeys(t, pool))
	}
}

// Expired rows of the other primitives go, live ones stay, each kind
// bounded by the limit.
func TestSweepOtherKinds(t *testing.T) {
	pool, db := fresh(t, nil)
	ctx := ctxT(t)
	_, err := pool.Exec(ctx, `
INSERT INTO tenure.idempotency (scope, key, fingerprint, fence, state, expires_at) VALUES
	('s', 'old1', 'f', 1, 2, clock_timestamp() - interval '1 hour'),
	('s', 'old2', 'f', 1, 2, clock_timestamp() - interval '1 hour'),
	('s', 'live', 'f', 1, 2, clock_timestamp() + interval '1 hour');
INSERT INTO tenure.idempotency (scope, key, fingerprint, fence, state, claim_until, expires_at) VALUES
	('s', 'claimed', 'f', 1, 1, clock_timestamp() + interval '1 hour', clock_timestamp() - interval '1 hour');
INSERT INTO tenure.sessions (id, user_id, data, version, created_at, idle_until, absolute_until) VALUES
	('idle', 'u', '', 1, clock_timestamp(), clock_timestamp() - interval '1 second', clock_timestamp() + interval '1 hour'),
	('abs', 'u', '', 1, clock_timestamp(), clock_timestamp() + interval '1 hour', clock_timestamp() - interval '1 second'),
	('live', 'u', '', 1, clock_timestamp(), clock_timestamp() + interval '1 hour', clock_timestamp() + interval '2 hours');
INSERT INTO tenure.ratelimits (key, alg, a, b, c, expires_us) VALUES
	('old', 1, 0, 0, 0, 1), ('live', 1, 0, 0, 0, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint + 3600000000);
INSERT INTO tenure.ratelimit_permits (key, last_fence, ids, fences, expires, expires_us) VALUES
	('old', 1, '{}', '{}', '{}', 1);
INSERT INTO tenure.schedule_slots (job, slot_id, slot_time, state, node, attempts, fence, finished_at, error) VALUES
	('j', 'a', clock_timestamp() - interval '90 days', 'done', 'n', 1, 1, clock_timestamp() - interval '90 days', ''),
	('j', 'b', clock_timestamp() - interval '80 days', 'failed', 'n', 1, 1, clock_timestamp() - interval '80 days', 'x'),
	('j', 'c', clock_timestamp() - interval '70 days', 'done', 'n', 1, 1, clock_timestamp() - interval '70 days', ''),
	('k', 'z', clock_timestamp() - interval '90 days', 'done', 'n', 1, 1, clock_timestamp() - interval '90 days', ''),
	('j', 'r', clock_timestamp() - interval '85 days', 'running', 'n', 1, 1, NULL, '');
INSERT INTO tenure.schedule_ledger (job, slot_id, fence, completed_at) VALUES
	('j', 'a', 1, clock_timestamp() - interval '90 days'), ('j', 'c', 1, clock_timestamp() - interval '70 days'),
	('k', 'z', 1, clock_timestamp() - interval '90 days');
INSERT INTO tenure.schedule_attempts (job, slot_id, history) VALUES ('j', 'a', '[]'), ('j', 'c', '[]')`)
	if err != nil {
		t.Fatal(err)
	}
	r, err := db.Sweep(ctx, retention.Options{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r.Deleted[retention.Idempotency] != 1 || r.Deleted[retention.Sessions] != 1 || !r.More {
		t.Fatalf("Sweep(Limit 1) = %+v, want one of each and more", r)
	}
	total := r
	for r.More {
		if r, err = db.Sweep(ctx, retention.Options{}); err != nil {
			t.Fatal(err)
		}
		for k, v := range r.Deleted {
			total.Add(k, v)
		}
	}
	want := map[string]int{retention.Idempotency: 2, retention.Sessions: 2, retention.RateLimits: 1, retention.Permits: 1,
		retention.ScheduleSlots: 3, retention.ScheduleLedger: 1} // slots: two records and one history
	for k, v := range want {
		if total.Deleted[k] != v {
			t.Fatalf("deleted %s = %d, want %d (all: %v)", k, total.Deleted[k], v, total)
		}
	}
	var keep string
	err = pool.QueryRow(ctx, `SELECT (SELECT string_agg(key, ',' ORDER BY key) FROM tenure.idempotency) || ' ' ||
	(SELECT string_agg(id, ',' ORDER BY id) FROM tenure.sessions) || ' ' ||
	(SELECT string_agg(key, ',' ORDER BY key) FROM tenure.ratelimits) || ' ' ||
	(SELECT string_agg(job || slot_id, ',' ORDER BY job, slot_id) FROM tenure.schedule_slots) || ' ' ||
	(SELECT string_agg(job || slot_id, ',' ORDER BY job, slot_id) FROM tenure.schedule_ledger) || ' ' ||
	(SELECT string_agg(job || slot_id, ',' ORDER BY job, slot_id) FROM tenure.schedule_attempts)`).Scan(&keep)
	if err != nil {
		t.Fatal(err)
	}
	// Kept: the live and claimed records, the live session and limit, the
	// running slot, each job's latest slot and their ledger rows.
	if keep != "claimed,live live live jc,jr,kz jc,kz jc" {
		t.Fatalf("kept %q", keep)
	}
}

// List pages through the keys in byte order with the holder.
func TestListLeases(t *testing.T) {
	_, db := fresh(t, nil)
	ctx := ctxT(t)
	ha := db.Leases().(leasedriver.HolderAcquirer)
	for _, k := range []string{"jobs/b", "jobs/a", "jobs/B", "other/x", "jobs/c"} {
		if _, err := ha.AcquireHolder(ctx, k, lease.NewToken(), time.Minute, "node "+k); err != nil {
			t.Fatal(err)
		}
	}
	l := db.Leases().(lease.Lister)
	page, err := l.List(ctx, "jobs/", "", 2)
	if err != nil || len(page) != 2 || page[0].Key != "jobs/B" || page[1].Key != "jobs/a" || page[0].Holder != "node jobs/B" || !page[0].Held {
		t.Fatalf("first page %+v, %v", page, err)
	}
	page, err = l.List(ctx, "jobs/", page[1].Key, 10)
	if err != nil || len(page) != 2 || page[0].Key != "jobs/b" || page[1].Key != "jobs/c" {
		t.Fatalf("second page %+v, %v", page, err)
	}
	if _, err := l.List(ctx, "", "", 0); err == nil {
		t.Fatal("limit 0 accepted")
	}
}
