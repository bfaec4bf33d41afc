package sqlitestore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/retention"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

// Lease rows free for longer than the fence retention are swept (bounded
// per call); held and recently freed rows, and a row whose fence is ahead
// of the clock, stay; a swept key's next fence is above its last.
func TestSweepLeases(t *testing.T) {
	ctx := t.Context()
	clk := newFakeClock()
	s := open(t, tempPath(t), &sqlitestore.Options{Clock: clk.Now})
	ls := s.Leases()
	const n = 300
	var last uint64
	for i := range n {
		k := fmt.Sprintf("order/%04d", i)
		tok := lease.NewToken()
		g, err := ls.Acquire(ctx, k, tok, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		last = g.Fence
		if i%2 == 0 {
			if err := ls.Release(ctx, k, tok); err != nil {
				t.Fatal(err)
			}
		}
	}
	ahead := clk.Now().Add(30 * 24 * time.Hour).UnixMicro()
	if _, err := s.DB().ExecContext(ctx, `INSERT INTO tenure_leases ("key", token, fence, expires_us) VALUES ('order/ahead', NULL, ?1, 0)`, ahead); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	// Within a retention of 2h only the row that ended long ago goes,
	// although its fence is ahead of the clock.
	if r, err := s.Sweep(ctx, retention.Options{FenceRetention: 2 * time.Hour}); err != nil || r.Deleted[retention.Leases] != 1 {
		t.Fatalf("within a retention of 2h: %+v, %v; want 1 lease row deleted", r, err)
	}
	if _, err := ls.Acquire(ctx, "order/held", lease.NewToken(), time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := ls.Acquire(ctx, fmt.Sprintf("order/%04d", 1), lease.NewToken(), time.Hour); err != nil {
		t.Fatal(err) // expired, taken again: held now
	}
	swept := 0
	for calls := 0; ; calls++ {
		r, err := s.Sweep(ctx, retention.Options{Limit: 64})
		if err != nil {
			t.Fatal(err)
		}
		if r.Deleted[retention.Leases] > 64 {
			t.Fatalf("one call deleted %d", r.Deleted[retention.Leases])
		}
		swept += r.Deleted[retention.Leases]
		if !r.More {
			break
		}
		if calls > 20 {
			t.Fatal("Sweep does not come round")
		}
	}
	// Every ended row goes (the floor keeps later fences above them).
	if swept != n-1 {
		t.Fatalf("swept %d, want %d", swept, n-1)
	}
	list, err := ls.(lease.Lister).List(ctx, "order/", "", 100)
	if err != nil || len(list) != 2 || list[0].Key != "order/0001" || list[1].Key != "order/held" {
		t.Fatalf("left %+v, %v", list, err)
	}
	var floor int64
	if err := s.DB().QueryRowContext(ctx, `SELECT fence FROM tenure_lease_fence_floor`).Scan(&floor); err != nil || floor != ahead {
		t.Fatalf("fence floor %d, %v; want %d (the greatest fence swept)", floor, err, ahead)
	}
	g, err := ls.Acquire(ctx, fmt.Sprintf("order/%04d", n-1), lease.NewToken(), time.Minute)
	if err != nil || g.Fence <= last || g.Fence <= uint64(ahead) {
		t.Fatalf("fence after the row was swept: %d, %v; want above %d and above the floor %d", g.Fence, err, last, ahead)
	}
}

// Expired rows of the other primitives go, live ones stay.
func TestSweepOtherKinds(t *testing.T) {
	ctx := t.Context()
	clk := newFakeClock()
	s := open(t, tempPath(t), &sqlitestore.Options{Clock: clk.Now})
	now := clk.Now().UnixMicro()
	day := int64(24 * time.Hour / time.Microsecond)
	_, err := s.DB().ExecContext(ctx, `
INSERT INTO tenure_idempotency (scope, "key", fingerprint, fence, state, expires_us) VALUES ('s', 'old', 'f', 1, 2, ?1 - 1), ('s', 'live', 'f', 1, 2, ?1 + 1);
INSERT INTO tenure_idempotency (scope, "key", fingerprint, fence, state, claim_us, expires_us) VALUES ('s', 'claimed', 'f', 1, 1, ?1 + 1, ?1 - 1);
INSERT INTO tenure_sessions (id, user_id, data, version, created_us, idle_us, absolute_us) VALUES
	('idle', 'u', x'', 1, 0, ?1 - 1, ?1 + 1), ('live', 'u', x'', 1, 0, ?1 + 1, ?1 + 2);
INSERT INTO tenure_ratelimit ("key", state, expires_us) VALUES ('old', x'', ?1 - 1), ('live', x'', ?1 + 1);
INSERT INTO tenure_schedule_slots (job, slot_id, slot_us, state, node, attempts, fence, finished_us, error) VALUES
	('j', 'a', ?1 - 90 * ?2, 'done', 'n', 1, 1, ?1 - 90 * ?2, ''),
	('j', 'r', ?1 - 85 * ?2, 'running', 'n', 1, 1, NULL, ''),
	('j', 'c', ?1 - 70 * ?2, 'done', 'n', 1, 1, ?1 - 70 * ?2, '');
INSERT INTO tenure_schedule_ledger (job, slot_id, fence, completed_us) VALUES ('j', 'a', 1, ?1 - 90 * ?2), ('j', 'c', 1, ?1 - 70 * ?2);
INSERT INTO tenure_schedule_attempts (job, slot_id, history) VALUES ('j', 'a', '[]'), ('j', 'c', '[]');`, now, day)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Sweep(ctx, retention.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{retention.Leases: 0, retention.Idempotency: 1, retention.Sessions: 1, retention.RateLimits: 1,
		retention.ScheduleSlots: 2, retention.ScheduleLedger: 1}
	for k, v := range want {
		if r.Deleted[k] != v {
			t.Fatalf("deleted %s = %d, want %d (all: %v)", k, r.Deleted[k], v, r)
		}
	}
	var keep string
	err = s.DB().QueryRowContext(ctx, `SELECT (SELECT group_concat("key") FROM (SELECT "key" FROM tenure_idempotency ORDER BY "key")) || ' ' ||
		(SELECT group_concat(id) FROM tenure_sessions) || ' ' || (SELECT group_concat("key") FROM tenure_ratelimit) || ' ' ||
		(SELECT group_concat(slot_id) FROM (SELECT slot_id FROM tenure_schedule_slots ORDER BY slot_id)) || ' ' ||
		(SELECT group_concat(slot_id) FROM tenure_schedule_ledger) || ' ' || (SELECT group_concat(slot_id) FROM tenure_schedule_attempts)`).Scan(&keep)
	if err != nil {
		t.Fatal(err)
	}
	if keep != "claimed,live live live c,r c c" {
		t.Fatalf("kept %q", keep)
	}
}
