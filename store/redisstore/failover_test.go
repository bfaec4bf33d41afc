package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lease"
	scheddriver "github.com/tenurekit/tenure/schedule/driver"
	"github.com/tenurekit/tenure/session"
	sessiondriver "github.com/tenurekit/tenure/session/driver"
	"github.com/tenurekit/tenure/store/redisstore"
)

// A failover to a lagging replica: the replica's replication stream is held
// back by a proxy while its link stays up (the primary still counts it as
// connected), the primary is killed and the replica promoted. With the
// default options every write that was reported done survives: no lease
// with two holders, no older fence admitted, no revoked session that
// loads, no idempotency record that replays a different result, no slot
// completed twice. With confirmation turned off (the control) the same
// probe shows every one of those holes, which proves it can fail.

// failoverEnv is a deployment whose replication can be held back and that
// can fail over.
type failoverEnv interface {
	HoldReplication()
	Failover(t testing.TB)
}

// holes counts what the failover lost of what was reported done.
type holes struct {
	TwoHolders, OlderFence, Revived, ReplayDiffers, SlotTwice int
}

func (h holes) total() int {
	return h.TwoHolders + h.OlderFence + h.Revived + h.ReplayDiffers + h.SlotTwice
}

// probe is one store's share of the failover probe: its keys and what its
// writes during the hold reported.
type probe struct {
	name   string
	s      *redisstore.Store
	optOut bool

	leaseKey, resource, user, job, idemKey string

	locker *lease.Locker
	sm     *session.Manager
	keeper *idempotency.Keeper
	tok    session.Token
	gone   session.Token // revoked before replication was held back
	done   string        // an idempotency key completed before

	// What the writes during the hold reported.
	heldLease *lease.Lease
	errs      map[string]error
	mu        sync.Mutex
}

func (p *probe) record(op string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.errs[op] = err
}

// onShard0 returns the first name base-N whose hash tag (as tag builds it
// from the name) is in slots 0-5460, the shard of the cluster harness that
// has the lagging replica; outside a cluster any name would do.
func onShard0(base string, tag func(string) string) string {
	for i := 0; ; i++ {
		n := base + "-" + strconv.Itoa(i)
		if testenv.KeySlot(tag(n)) <= 5460 {
			return n
		}
	}
}

func plainTag(n string) string { return "{" + n + "}" }

const idemScope = "probe"

func newProbe(t *testing.T, name string, s *redisstore.Store, optOut bool) *probe {
	t.Helper()
	base := name + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	p := &probe{name: name, s: s, optOut: optOut, errs: map[string]error{}}
	p.leaseKey = onShard0(base+"-lease", plainTag)
	p.resource = onShard0(base+"-res", plainTag)
	p.user = onShard0(base+"-user", func(u string) string { return "{s:" + sessiondriver.UserShard(u) + "}" })
	p.job = onShard0(base+"-job", func(j string) string { return "{sched:" + j + "}" })
	idemTag := func(k string) string { return "{" + strconv.Itoa(len(idemScope)) + ":" + idemScope + k + "}" }
	p.idemKey = onShard0(base+"-idem", idemTag)
	p.done = onShard0(base+"-done", idemTag)
	var err error
	if p.locker, err = lease.New(s.Leases(), nil); err != nil {
		t.Fatal(err)
	}
	if p.sm, err = session.New(s.Sessions(), nil); err != nil {
		t.Fatal(err)
	}
	if p.keeper, err = idempotency.New(s.Idempotency(), nil); err != nil {
		t.Fatal(err)
	}
	return p
}

// before writes what must exist on the replica before replication is held
// back: a live session, an admitted fence, a revoked session and a
// completed idempotency record.
func (p *probe) before(t *testing.T) {
	t.Helper()
	ctx := ctxT(t)
	var err error
	if p.tok, _, err = p.sm.Create(ctx, p.user, nil); err != nil {
		t.Fatalf("%s: create a session: %v", p.name, err)
	}
	if err := p.s.FencedSet(ctx, p.resource, 10, []byte("ten")); err != nil {
		t.Fatalf("%s: FencedSet 10: %v", p.name, err)
	}
	if p.gone, _, err = p.sm.Create(ctx, p.user, nil); err != nil {
		t.Fatalf("%s: create a session: %v", p.name, err)
	}
	if err := p.sm.Revoke(ctx, session.TokenID(p.gone)); err != nil {
		t.Fatalf("%s: revoke a session: %v", p.name, err)
	}
	if _, err := p.doKey(ctx, p.done, "zero"); err != nil {
		t.Fatalf("%s: an idempotent request: %v", p.name, err)
	}
}

// slotRun claims a slot of the job and finishes it done, as a scheduler
// does; it reports whether the store said the slot was completed now.
func (p *probe) slotRun(ctx context.Context) error {
	claims := p.s.Schedules().Claims()
	lk, err := lease.New(claims, nil)
	if err != nil {
		return err
	}
	l, err := lk.TryAcquire(ctx, scheddriver.ClaimKey(p.job, "slot-1"), 30*time.Second)
	if err != nil {
		return fmt.Errorf("claim: %w", err)
	}
	defer l.Release(context.WithoutCancel(ctx))
	st := p.s.Schedules()
	if _, err := st.Begin(ctx, scheddriver.BeginRequest{Job: p.job, SlotID: "slot-1", SlotTime: time.Unix(1_700_000_000, 0), Node: p.name, Fence: l.Fence()}); err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if _, err := st.Finish(ctx, scheddriver.FinishRequest{Job: p.job, SlotID: "slot-1", Fence: l.Fence(), State: scheddriver.Done}); err != nil {
		return fmt.Errorf("finish: %w", err)
	}
	return nil
}

func (p *probe) idem(ctx context.Context, value string) (idempotency.Result, error) {
	return p.doKey(ctx, p.idemKey, value)
}

func (p *probe) doKey(ctx context.Context, key, value string) (idempotency.Result, error) {
	return p.keeper.Do(ctx, idempotency.Request{Scope: idemScope, Key: key}, func(context.Context, *idempotency.Claim) ([]byte, error) {
		return []byte(value), nil
	})
}

// during runs the writes whose outcome the failover tests, while
// replication is held back, each on its own goroutine.
func (p *probe) during(ctx context.Context, wg *sync.WaitGroup) {
	wg.Go(func() {
		l, err := p.locker.TryAcquire(ctx, p.leaseKey, time.Minute)
		p.heldLease = l
		p.record("lease", err)
	})
	wg.Go(func() { p.record("fence", p.s.FencedSet(ctx, p.resource, 20, []byte("twenty"))) })
	wg.Go(func() { p.record("revoke", p.sm.Revoke(ctx, session.TokenID(p.tok))) })
	wg.Go(func() {
		r, err := p.idem(ctx, "first")
		if err == nil && string(r.Value) != "first" {
			err = fmt.Errorf("Do returned %q, want first", r.Value)
		}
		if err == nil {
			// A retry of the same request replays the stored result.
			r, err = p.idem(ctx, "retried")
			if err == nil && (!r.Replayed || string(r.Value) != "first") {
				err = fmt.Errorf("the retry returned %q (replayed %v), want a replay of first", r.Value, r.Replayed)
			}
		}
		p.record("idempotency", err)
	})
	wg.Go(func() { p.record("slot", p.slotRun(ctx)) })
	// Answers that report state this call did not write are confirmed
	// too: a replay, and a revoke of a session already gone (a logout
	// takes it for done).
	wg.Go(func() {
		r, err := p.doKey(ctx, p.done, "again")
		if err == nil && (!r.Replayed || string(r.Value) != "zero") {
			err = fmt.Errorf("Do returned %q (replayed %v), want a replay of zero", r.Value, r.Replayed)
		}
		p.record("replay", err)
	})
	wg.Go(func() {
		err := p.sm.Revoke(ctx, session.TokenID(p.gone))
		if errors.Is(err, session.ErrNotFound) {
			err = nil
		} else if err == nil {
			err = errors.New("a second revoke found the session")
		}
		p.record("revoke again", err)
	})
}

// eventually retries op while it fails with ErrUnavailable (the store
// reconnecting to the promoted replica), until a deadline.
func eventually(t *testing.T, what string, op func() error) error {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for {
		err := op()
		if err == nil || !errors.Is(err, lease.ErrUnavailable) && !errors.Is(err, session.ErrUnavailable) && !errors.Is(err, idempotency.ErrUnavailable) {
			return err
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s after the failover: still unavailable: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// after probes the promoted replica and counts the holes: writes reported
// done before the failover that it forgot.
func (p *probe) after(t *testing.T) holes {
	t.Helper()
	ctx := ctxT(t)
	var h holes
	ok := func(op string) bool { return p.errs[op] == nil }

	if err := eventually(t, p.name+": acquire", func() error {
		l, err := p.locker.TryAcquire(ctx, p.leaseKey, time.Minute)
		if err == nil {
			if ok("lease") && time.Now().Before(p.heldLease.ValidUntil()) {
				h.TwoHolders++
			}
			l.Release(ctx)
		}
		return err
	}); err != nil && !errors.Is(err, lease.ErrHeld) {
		t.Errorf("%s: acquire after the failover: %v", p.name, err)
	}

	err := eventually(t, p.name+": FencedSet", func() error { return p.s.FencedSet(ctx, p.resource, 15, []byte("fifteen")) })
	switch {
	case err == nil:
		if ok("fence") {
			h.OlderFence++
		}
	case !errors.Is(err, fence.ErrStale):
		t.Errorf("%s: FencedSet 15 after the failover: %v", p.name, err)
	}

	err = eventually(t, p.name+": load", func() error { _, err := p.sm.Load(ctx, p.tok); return err })
	switch {
	case err == nil:
		if ok("revoke") {
			h.Revived++
		}
	case !errors.Is(err, session.ErrNotFound):
		t.Errorf("%s: load after the failover: %v", p.name, err)
	}

	var r idempotency.Result
	err = eventually(t, p.name+": idempotent request", func() error { var err error; r, err = p.idem(ctx, "second"); return err })
	switch {
	case err != nil:
		t.Errorf("%s: idempotent request after the failover: %v", p.name, err)
	case ok("idempotency") && string(r.Value) != "first":
		h.ReplayDiffers++
	}

	err = eventually(t, p.name+": slot", func() error { return p.slotRun(ctx) })
	switch {
	case err == nil:
		if ok("slot") {
			h.SlotTwice++
		}
	case !errors.Is(err, scheddriver.ErrFinal):
		t.Errorf("%s: slot after the failover: %v", p.name, err)
	}
	return h
}

// runFailover runs the probe for every store against env and checks the
// verdicts: no hole with confirmation on, every hole with it off.
func runFailover(t *testing.T, env failoverEnv, barrier func(t *testing.T), probes []*probe, extra func(ctx context.Context) error) {
	for _, p := range probes {
		p.before(t)
	}
	// Everything so far is on the replica before the stream is held back.
	barrier(t)
	env.HoldReplication()
	ctx := ctxT(t)
	var wg sync.WaitGroup
	for _, p := range probes {
		p.during(ctx, &wg)
	}
	var extraErr error
	if extra != nil {
		wg.Go(func() { extraErr = extra(ctx) })
	}
	wg.Wait()
	if extraErr != nil {
		t.Errorf("while replication was held back: %v", extraErr)
	}
	for _, p := range probes {
		for op, err := range p.errs {
			switch {
			case p.optOut && err != nil:
				t.Errorf("%s: %s while replication was held back: %v (confirmation is off: it should succeed)", p.name, op, err)
			case !p.optOut && !errors.Is(err, redisstore.ErrUnconfirmed):
				t.Errorf("%s: %s while replication was held back: %v, want an error wrapping ErrUnconfirmed", p.name, op, err)
			case !p.optOut && !errors.Is(err, lease.ErrUnavailable):
				t.Errorf("%s: %s: %v does not wrap lease.ErrUnavailable", p.name, op, err)
			}
		}
	}
	env.Failover(t)
	for _, p := range probes {
		h := p.after(t)
		t.Logf("%s (confirmation off: %v): %+v", p.name, p.optOut, h)
		switch {
		case p.optOut && (h.TwoHolders != 1 || h.OlderFence != 1 || h.Revived != 1 || h.ReplayDiffers != 1 || h.SlotTwice != 1):
			t.Errorf("%s, confirmation off (the control): holes %+v, want one of each: the probe did not catch the lost writes", p.name, h)
		case !p.optOut && h.total() != 0:
			t.Errorf("%s, default options: holes %+v, want none", p.name, h)
		}
	}
}

// barrierOn writes a key on the primary at addr and waits until one replica
// acknowledged it: replication is ordered, so the replica then has every
// earlier write too.
func barrierOn(t *testing.T, addr, key string) {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableRetry: true, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := ctxT(t)
	dc, release := c.Dedicate()
	defer release()
	res := dc.DoMulti(ctx, dc.B().Set().Key(key).Value("1").Build(), dc.B().Wait().Numreplicas(1).Timeout(30000).Build())
	if n, err := res[1].AsInt64(); err != nil || n < 1 {
		t.Fatalf("barrier on %s: WAIT = %d, %v", addr, n, err)
	}
}

func TestFailoverSingleNode(t *testing.T) {
	t.Parallel() // servers of its own; the waits are timeouts, not CPU
	env := testenv.NewRedisFailover(t, nil)
	rc := newClient(t, env.Addr())
	gc := newGoClient(t, env.Addr())
	off := &redisstore.Options{Replication: redisstore.Replication{Off: true}}
	probes := []*probe{
		newProbe(t, "rueidis", newRedis(t, rc, nil), false),
		newProbe(t, "go-redis", newGoRedis(t, gc, nil), false),
		newProbe(t, "rueidis-off", newRedis(t, rc, off), true),
		newProbe(t, "go-redis-off", newGoRedis(t, gc, off), true),
	}
	for _, p := range probes[:2] {
		st, err := p.s.Replicas(ctxT(t))
		if err != nil || len(st) != 1 || st[0].Online != 1 || st[0].Command != "WAIT" || st[0].Required != 1 {
			t.Fatalf("%s: Replicas = %+v, %v; want one primary with one online replica, confirmed by WAIT 1", p.name, st, err)
		}
	}
	runFailover(t, env, func(t *testing.T) { barrierOn(t, env.Primary.Addr(), "barrier") }, probes, nil)
}

func TestFailoverCluster(t *testing.T) {
	t.Parallel() // servers of its own; the waits are timeouts, not CPU
	env := testenv.NewRedisClusterFailover(t)
	rc := newClusterClient(t, env.Addrs(), nil)
	gc := newGoClusterClient(t, env.Addrs(), nil)
	off := &redisstore.Options{Replication: redisstore.Replication{Off: true}}
	probes := []*probe{
		newProbe(t, "rueidis", newRedis(t, rc, nil), false),
		newProbe(t, "go-redis", newGoRedis(t, gc, nil), false),
		newProbe(t, "rueidis-off", newRedis(t, rc, off), true),
		newProbe(t, "go-redis-off", newGoRedis(t, gc, off), true),
	}
	for _, p := range probes[:2] {
		st, err := p.s.Replicas(ctxT(t))
		if err != nil || len(st) != 3 {
			t.Fatalf("%s: Replicas = %+v, %v; want three primaries", p.name, st, err)
		}
		with := 0
		for _, x := range st {
			if x.Online == 1 && x.Command == "WAIT" && x.Required == 1 {
				with++
			} else if x.Online != 0 || x.Command != "" {
				t.Fatalf("%s: Replicas = %+v: a primary without replicas must not wait", p.name, st)
			}
		}
		if with != 1 {
			t.Fatalf("%s: Replicas = %+v: want one primary with one replica", p.name, st)
		}
	}
	// The rule holds per shard: a shard without replicas is not waited
	// for, so its writes succeed while the other shard's replica lags.
	other := func(ctx context.Context) error {
		for _, p := range probes[:2] {
			res := "other-shard-" + p.name + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			for i := 0; ; i++ {
				if testenv.KeySlot("{"+res+strconv.Itoa(i)+"}") > 5460 {
					res += strconv.Itoa(i)
					break
				}
			}
			if err := p.s.FencedSet(ctx, res, 1, []byte("x")); err != nil {
				return fmt.Errorf("%s: FencedSet on a shard without replicas: %w", p.name, err)
			}
		}
		return nil
	}
	barrier := func(t *testing.T) {
		key := onShard0("barrier", plainTag)
		barrierOn(t, env.Nodes()[0].Addr(), "{"+key+"}")
	}
	runFailover(t, env, barrier, probes, other)
}

// TestFailoverDuringWait: the primary dies while a grant waits for its
// replica's confirmation (the replication stream held back), and the
// replica that lacks the grant is promoted at the same address. The grant
// must not be reported done: the connection that ran it broke before WAIT
// answered, and the promoted replica, which answers at the address now,
// has no replicas and no such lease. Reported done, it would give the key
// a second holder at the next acquire.
func TestFailoverDuringWait(t *testing.T) {
	t.Parallel() // servers of its own
	for _, form := range []string{"rueidis", "go-redis"} {
		t.Run(form, func(t *testing.T) {
			t.Parallel()
			env := testenv.NewRedisFailover(t, nil)
			// A long confirmation timeout: WAIT is still waiting when the
			// primary dies.
			o := &redisstore.Options{Replication: redisstore.Replication{Timeout: time.Minute}}
			var s *redisstore.Store
			if form == "rueidis" {
				s = newRedis(t, newClient(t, env.Addr()), o)
			} else {
				s = newGoRedis(t, newGoClient(t, env.Addr()), o)
			}
			ls := s.Leases()
			ctx := ctxT(t)
			if _, err := ls.Acquire(ctx, "warm", "token-warm", time.Minute); err != nil {
				t.Fatalf("a confirmed grant before the failover: %v", err)
			}
			env.HoldReplication()
			errc := make(chan error, 1)
			go func() {
				_, err := ls.Acquire(ctx, "k", "token-1", time.Minute)
				errc <- err
			}()
			// The grant ran on the primary: it is held there.
			direct := newClient(t, env.Primary.Addr())
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				info, err := newRedis(t, direct, nil).Leases().Inspect(ctx, "k")
				if err == nil && info.Held {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the grant did not reach the primary: %+v, %v", info, err)
				}
			}
			env.Failover(t)
			if err := <-errc; !errors.Is(err, lease.ErrUnavailable) {
				t.Fatalf("a grant whose confirmation the failover cut off: %v, want ErrUnavailable (not confirmed)", err)
			}
			// The promoted replica never had it: the key is free there
			// (asked through a store of its own, whose first write sees a
			// primary without replicas).
			after := newRedis(t, newClient(t, env.Addr()), o)
			if _, err := after.Leases().Acquire(ctx, "k", "token-2", time.Minute); err != nil {
				t.Fatalf("the key after the failover: %v", err)
			}
		})
	}
}

// A confirmation that came back short (the replica is connected but
// received nothing) and a failover before the store asks the primary how
// many replicas it has: the question reaches the promoted replica, which
// has none, yet never received the write. The grant must still be
// reported unconfirmed, not done: the answer comes from another server.
func TestFailoverAfterShortConfirm(t *testing.T) {
	t.Parallel() // servers of its own
	for _, form := range []string{"rueidis", "go-redis"} {
		t.Run(form, func(t *testing.T) {
			t.Parallel()
			env := testenv.NewRedisFailover(t, nil)
			o := &redisstore.Options{Replication: redisstore.Replication{Timeout: 200 * time.Millisecond}}
			var s *redisstore.Store
			if form == "rueidis" {
				s = newRedis(t, newClient(t, env.Addr()), o)
			} else {
				s = newGoRedis(t, newGoClient(t, env.Addr()), o)
			}
			ls := s.Leases()
			ctx := ctxT(t)
			// A confirmed grant before the failover: the replica may still be
			// syncing, or slow to answer on a loaded machine, so the same
			// token asks again until it is confirmed.
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				_, err := ls.Acquire(ctx, "warm", "token-warm", time.Minute)
				if err == nil {
					break
				}
				if !errors.Is(err, redisstore.ErrUnconfirmed) || time.Now().After(deadline) {
					t.Fatalf("a confirmed grant before the failover: %v", err)
				}
			}
			var fired atomic.Int32
			s.SetShortConfirmHook(func() {
				if fired.Add(1) != 1 {
					return
				}
				env.Failover(t)
				// The store's own client reaches the promoted replica.
				for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
					st, err := s.Replicas(ctx)
					if err == nil && len(st) == 1 && !st[0].Replica && st[0].Online == 0 {
						return
					}
					if time.Now().After(deadline) {
						t.Fatalf("the store does not reach the promoted replica: %+v, %v", st, err)
					}
				}
			})
			env.HoldReplication()
			_, err := ls.Acquire(ctx, "k", "token-1", time.Minute)
			if fired.Load() == 0 {
				t.Fatalf("the confirmation was not short: %v", err)
			}
			if !errors.Is(err, lease.ErrUnavailable) || !errors.Is(err, redisstore.ErrUnconfirmed) {
				t.Fatalf("a grant the promoted replica never received: %v, want ErrUnconfirmed", err)
			}
			// The key is free on the new primary, and the store, once it
			// sees a primary without replicas, grants it.
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				_, err := ls.Acquire(ctx, "k", "token-2", time.Minute)
				if err == nil {
					break
				}
				if !errors.Is(err, redisstore.ErrUnconfirmed) || time.Now().After(deadline) {
					t.Fatalf("the key after the failover: %v", err)
				}
			}
		})
	}
}
