package redisstore_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tenurekit/tenure/idempotency"
	idemdriver "github.com/tenurekit/tenure/idempotency/driver"
	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/ratelimit"
	ratedriver "github.com/tenurekit/tenure/ratelimit/driver"
	"github.com/tenurekit/tenure/session"
	sessiondriver "github.com/tenurekit/tenure/session/driver"
	"github.com/tenurekit/tenure/store/redisstore"
)

// unconfirmed checks that err reports an unconfirmed write: ErrUnconfirmed
// and the primitive's ErrUnavailable (unavailable), never a token.
func unconfirmed(t *testing.T, what string, err error, unavailable error, token string) {
	t.Helper()
	if !errors.Is(err, redisstore.ErrUnconfirmed) || !errors.Is(err, unavailable) {
		t.Fatalf("%s: %v, want an error wrapping ErrUnconfirmed and %v", what, err, unavailable)
	}
	if token != "" && strings.Contains(err.Error(), token) {
		t.Fatalf("%s: the error shows the token: %v", what, err)
	}
}

// Replicas: N is a requirement: on a server without replicas every write
// that a guarantee rests on fails closed, and what it granted is given back
// on the primary at once.
func TestRequiredReplicasMissing(t *testing.T) {
	srv := testenv.SharedRedis(t)
	for _, form := range []struct {
		name string
		open func(o *redisstore.Options) *redisstore.Store
	}{
		{"rueidis", func(o *redisstore.Options) *redisstore.Store { return newRedis(t, newClient(t, srv.Addr()), o) }},
		{"go-redis", func(o *redisstore.Options) *redisstore.Store { return newGoRedis(t, newGoClient(t, srv.Addr()), o) }},
	} {
		t.Run(form.name, func(t *testing.T) {
			ctx := ctxT(t)
			rc := newClient(t, srv.Addr())
			o := &redisstore.Options{Prefix: uniq(t, "req") + ":", Replication: redisstore.Replication{Replicas: 1, Timeout: 20 * time.Millisecond}}
			s := form.open(o)
			st, err := s.Replicas(ctx)
			if err != nil || len(st) != 1 || st[0].Online != 0 || st[0].Command != "WAIT" || st[0].Required != 1 {
				t.Fatalf("Replicas = %+v, %v; want no replica online, WAIT for 1", st, err)
			}

			// A lease: refused, and the lock is not left on the primary.
			key, token := "k", lease.NewToken()
			_, err = s.Leases().Acquire(ctx, key, token, time.Minute)
			unconfirmed(t, "Acquire", err, lease.ErrUnavailable, token)
			lock, _ := s.LeaseKeys(key)
			if v, ok := get(t, rc, lock); ok {
				t.Fatalf("the unconfirmed grant is still on the primary: %s = %q", lock, v)
			}

			// A guarded write: the outcome is unknown (the primary has it).
			err = s.FencedSet(ctx, "r", 5, []byte("v"))
			unconfirmed(t, "FencedSet", err, lease.ErrUnavailable, "")

			// A session: refused, and the record is gone.
			userID := "u1"
			id := session.ID(sessiondriver.UserShard(userID) + strings.Repeat("a", 64))
			if err := id.Validate(); err != nil {
				t.Fatal(err)
			}
			_, err = s.Sessions().Create(ctx, session.Record{ID: id, UserID: userID}, time.Minute, time.Hour)
			unconfirmed(t, "session Create", err, session.ErrUnavailable, "")
			if n, err := rc.Do(ctx, rc.B().Exists().Key(s.SessionKey(id)).Build()).AsInt64(); err != nil || n != 0 {
				t.Fatalf("the unconfirmed session is still on the primary: EXISTS = %d, %v", n, err)
			}

			// An idempotency claim: refused, and released.
			idID := idempotency.ID{Scope: "s", Key: "k"}
			itok := idempotency.NewToken()
			_, err = s.Idempotency().Begin(ctx, idemdriver.Begin{ID: idID, Token: itok, ClaimTTL: time.Minute, Retention: time.Hour})
			unconfirmed(t, "idempotency Begin", err, idempotency.ErrUnavailable, itok.Reveal())
			if rec, err := s.Idempotency().Inspect(ctx, idID); err != nil || rec.Exists {
				t.Fatalf("Inspect after an unconfirmed claim = %+v, %v; want no live record", rec, err)
			}

			// A concurrency permit: refused, and given back (a store that
			// does not confirm gets the only permit at once).
			pk := ratedriver.StateKey{Name: "c", Kind: "p", Key: "k"}
			_, err = s.Limits().AcquirePermit(ctx, pk, "p1", 1, time.Minute)
			unconfirmed(t, "AcquirePermit", err, ratelimit.ErrUnavailable, "")
			plain := form.open(&redisstore.Options{Prefix: o.Prefix, Replication: redisstore.Replication{Off: true}})
			if g, err := plain.Limits().AcquirePermit(ctx, pk, "p2", 1, time.Minute); err != nil || !g.Acquired {
				t.Fatalf("the unconfirmed permit was not given back: %+v, %v", g, err)
			}

			// Rate limit decisions are not waited for by default...
			lim, err := ratelimit.New(s.Limits(), ratelimit.GCRA, ratelimit.Limit{Name: "l", Rate: 10, Period: time.Second}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if d, err := lim.Allow(ctx, "k"); err != nil || !d.Allowed {
				t.Fatalf("Allow = %+v, %v; want allowed, unconfirmed", d, err)
			}
			// ...and are with RateLimits.
			o.Replication.RateLimits = true
			strict, err := ratelimit.New(form.open(o).Limits(), ratelimit.GCRA, ratelimit.Limit{Name: "l2", Rate: 10, Period: time.Second}, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, err = strict.Allow(ctx, "k")
			unconfirmed(t, "Allow with RateLimits", err, ratelimit.ErrUnavailable, "")
		})
	}
}

// A primary's replicas are counted as they come and go: a replica that
// connects is waited for, one that disconnects no longer is (and a
// primary left without replicas behaves as one that never had any).
func TestReplicasComeAndGo(t *testing.T) {
	t.Parallel() // servers of its own
	primary := testenv.Redis(t, &testenv.RedisOptions{Persist: true})
	rc := newClient(t, primary.Addr())
	hasWaitAOF := false
	if arr, err := rc.Do(ctxT(t), rc.B().Arbitrary("COMMAND", "INFO", "WAITAOF").Build()).ToArray(); err == nil && len(arr) == 1 && !arr[0].IsNil() {
		hasWaitAOF = true
	}
	stores := map[string]*redisstore.Store{
		"rueidis":  newRedis(t, rc, nil),
		"go-redis": newGoRedis(t, newGoClient(t, primary.Addr()), nil),
	}
	wait := newRedis(t, rc, &redisstore.Options{Replication: redisstore.Replication{Command: redisstore.ConfirmWait}})
	ctx := ctxT(t)
	for name, s := range stores {
		st, err := s.Replicas(ctx)
		if err != nil || len(st) != 1 || st[0].Online != 0 || st[0].Command != "" || st[0].Required != 0 || !st[0].AOF || st[0].WaitAOF != hasWaitAOF {
			t.Fatalf("%s: Replicas without a replica = %+v, %v; want none online, not confirmed, AOF on, WAITAOF %v", name, st, err, hasWaitAOF)
		}
	}

	replica := testenv.RedisReplica(t, primary)
	want := "WAIT"
	if hasWaitAOF {
		want = "WAITAOF" // the primary runs with appendonly yes
	}
	for name, s := range stores {
		st, err := s.Replicas(ctx)
		if err != nil || len(st) != 1 || st[0].Online != 1 || st[0].Command != want || st[0].Required != 1 {
			t.Fatalf("%s: Replicas with a replica = %+v, %v; want one online, %s for 1", name, st, err, want)
		}
		if _, err := s.Leases().Acquire(ctx, uniq(t, name), lease.NewToken(), time.Minute); err != nil {
			t.Fatalf("%s: Acquire confirmed by the replica: %v", name, err)
		}
	}
	if st, err := wait.Replicas(ctx); err != nil || len(st) != 1 || st[0].Command != "WAIT" {
		t.Fatalf("ConfirmWait: Replicas = %+v, %v; want WAIT", st, err)
	}

	// The replica goes away: once the primary no longer lists it, writes
	// succeed again without it.
	replica.Kill(t)
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := rc.Do(ctx, rc.B().Info().Section("replication").Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(info, "connected_slaves:0") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the primary still lists the killed replica: %s", info)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for name, s := range stores {
		if _, err := s.Leases().Acquire(ctx, uniq(t, name+"-alone"), lease.NewToken(), time.Minute); err != nil {
			t.Fatalf("%s: Acquire after the replica left: %v", name, err)
		}
		st, err := s.Replicas(ctx)
		if err != nil || len(st) != 1 || st[0].Online != 0 || st[0].Command != "" {
			t.Fatalf("%s: Replicas after the replica left = %+v, %v", name, st, err)
		}
	}
}

// Confirmation off: Replicas reports that no write is confirmed, whatever
// is connected.
func TestReplicationOff(t *testing.T) {
	t.Parallel() // servers of its own
	primary := testenv.Redis(t, nil)
	testenv.RedisReplica(t, primary)
	s := newRedis(t, newClient(t, primary.Addr()), &redisstore.Options{Replication: redisstore.Replication{Off: true}})
	st, err := s.Replicas(ctxT(t))
	if err != nil || len(st) != 1 || st[0].Online != 1 || st[0].Command != "" || st[0].Required != 0 {
		t.Fatalf("Replicas = %+v, %v; want one online replica and no confirmation", st, err)
	}
}
