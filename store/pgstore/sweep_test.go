package pgstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
	"github.com/tenurekit/tenure/retention"
)

// 3,000 per-order keys acquired and released leave no rows once they have
// been free for the fence retention; held keys, recently freed keys and a
// row whose fence is above the clock stay, and a swept key's next fence is
// still above its last.
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
	future := time.Now().Add(24 * time.Hour).UnixMicro()
	if _, err := pool.Exec(ctx, `INSERT INTO tenure.leases (key, token, fence, expires_at) VALUES ('order/ahead', NULL, $1, clock_timestamp() - interval '30 days')`, future); err != nil {
		t.Fatal(err)
	}
	// Within the default retention nothing goes.
	r, err := db.Sweep(ctx, retention.Options{})
	if err != nil || r.Deleted[retention.Leases] != 0 {
		t.Fatalf("Sweep with the default retention: %+v, %v", r, err)
	}
	time.Sleep(5 * time.Millisecond)
	swept := 0
	for calls := 0; ; calls++ {
		r, err := db.Sweep(ctx, retention.Options{Limit: 500, FenceRetention: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if r.Deleted[retention.Leases] > 500 {
			t.Fatalf("one call deleted %d lease rows, more than its limit", r.Deleted[retention.Leases])
		}
		swept += r.Deleted[retention.Leases]
		if !r.More {
			break
		}
		if calls > 20 {
			t.Fatal("Sweep does not come round")
		}
	}
	if swept != n+1 {
		t.Fatalf("swept %d lease rows, want %d (the released and the expired)", swept, n+1)
	}
	var left []string
	rows, err := pool.Query(ctx, `SELECT key FROM tenure.leases ORDER BY key`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		rows.Scan(&k)
		left = append(left, k)
	}
	if fmt.Sprint(left) != "[order/ahead order/held]" {
		t.Fatalf("rows left %v, want the held one and the one whose fence is ahead of the clock", left)
	}
	if info, err := ls.Inspect(ctx, "order/held"); err != nil || !info.Held {
		t.Fatalf("held key after Sweep: %+v, %v", info, err)
	}
	g, err := ls.Acquire(ctx, fmt.Sprintf("order/%05d", n-1), lease.NewToken(), time.Minute)
	if err != nil || g.Fence <= lastFence {
		t.Fatalf("fence after the row was swept: %d, %v; want above %d", g.Fence, err, lastFence)
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
