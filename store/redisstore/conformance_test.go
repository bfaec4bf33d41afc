package redisstore_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/idempotency/idempotencytest"
	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/lease/leasetest"
	"github.com/tenurekit/tenure/ratelimit/ratelimittest"
	"github.com/tenurekit/tenure/schedule/scheduletest"
	"github.com/tenurekit/tenure/session/sessiontest"
	"github.com/tenurekit/tenure/store/redisstore"
	"github.com/tenurekit/tenure/storetest"
)

// resource adapts the store's guard for the suite. Guarded writes go through
// the store under test; plain writes SET the very value key the guard
// protects (the negative control); reads go through a direct store.
type resource struct {
	s, direct *redisstore.Store
	c         rueidis.Client // direct client
}

func (r *resource) FencedWrite(ctx context.Context, name string, f uint64, v string) error {
	return r.s.FencedSet(ctx, name, f, []byte(v))
}

func (r *resource) FencedWriteAtLeast(ctx context.Context, name string, f uint64, v string) error {
	return r.s.FencedSetAtLeast(ctx, name, f, []byte(v))
}

func (r *resource) HolderWrite(ctx context.Context, l *lease.Lease, name, v string) error {
	return r.s.HolderSet(ctx, l, name, []byte(v))
}

// flushAll empties every server: the data loss of leasetest's Forget. Each
// server gets its own single-node connection: a client that detects a
// cluster would send FLUSHALL to whichever node it picks.
func flushAll(t *testing.T, servers ...*testenv.RedisServer) {
	t.Helper()
	for _, srv := range servers {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableRetry: true, ForceSingleClient: true})
		if err != nil {
			t.Fatalf("connect to %s: %v", srv, err)
		}
		t.Cleanup(c.Close)
		if err := c.Do(t.Context(), c.B().Flushall().Build()).Error(); err != nil {
			t.Fatalf("FLUSHALL on %s: %v", srv, err)
		}
	}
}

func (r *resource) PlainWrite(ctx context.Context, name, v string) error {
	key, _ := r.direct.ValueKeys(name)
	return r.c.Do(ctx, r.c.B().Set().Key(key).Value(v).Build()).Error()
}

func (r *resource) Read(ctx context.Context, name string) (string, error) {
	b, _, err := r.direct.FencedGet(ctx, name)
	return string(b), err
}

// proxies is a TCP proxy per cluster node, acting together.
type proxies []*testenv.Proxy

func (ps proxies) Cut() {
	for _, p := range ps {
		p.Cut()
	}
}

func (ps proxies) DropReplies() {
	for _, p := range ps {
		p.DropReplies()
	}
}

func (ps proxies) Heal() {
	for _, p := range ps {
		p.Heal()
	}
}

// newStore and newGoStore are the one place the conformance tests build a
// store on a client.
func newStore(c rueidis.Client, o *redisstore.Options) *redisstore.Store {
	return must(redisstore.New(c, o))
}

func newGoStore(c redis.UniversalClient, o *redisstore.Options) *redisstore.Store {
	return must(redisstore.NewGoRedis(c, o))
}

// TestConformance runs every suite on the store, through rueidis and
// through go-redis, on a single node and on Redis Cluster. The store under
// test reaches its server through TCP proxies (the faults; one per cluster
// node, acting together); Direct is a second client. The lease suite
// restarts its server without persistence (all data lost), so it runs on a
// server (or cluster) of its own; the others run on the shared ones, each
// case under a prefix of its own.
func TestConformance(t *testing.T) {
	t.Run("Single", func(t *testing.T) { storetest.Run(t, singleFactory(t, onRueidis)) })
	// A user's sessions and index share a hash tag, and every key of a job
	// is in the job's hash slot, so every script runs on one node.
	t.Run("Cluster", func(t *testing.T) {
		own := testenv.RedisCluster(t) // restarted by the lease suite
		cl := testenv.SharedRedisCluster(t)
		direct := newClusterClient(t, cl.Addrs(), nil)
		storetest.Run(t, storetest.Factory{
			Lease: func(t *testing.T) leasetest.Target {
				ps, via := clusterProxies(t, own)
				s := checked(t, newClusterClient(t, own.Addrs(), via), nil)
				dc := newClusterClient(t, own.Addrs(), nil)
				direct := newStore(dc, nil)
				return leasetest.Target{
					Store:  s.Leases(),
					Direct: direct.Leases(),
					Faults: ps,
					Restart: func(t *testing.T) lease.Store {
						restartCluster(t, own)
						return newStore(newClusterClient(t, own.Addrs(), nil), nil).Leases()
					},
					Forget: func(t *testing.T) lease.Store {
						flushAll(t, own.Nodes()...)
						return direct.Leases()
					},
					Resource:    &resource{s: s, direct: direct, c: dc},
					Ended:       endedHooks(direct, dc),
					EndWatchers: s.EndWakes,
				}
			},
			Idempotency: func(t *testing.T) idempotencytest.Target {
				ps, via := clusterProxies(t, cl)
				dc := newClusterClient(t, cl.Addrs(), nil)
				return idempotencytest.Target{
					Store:  checked(t, newClusterClient(t, cl.Addrs(), via), nil).Idempotency(),
					Direct: newStore(dc, nil).Idempotency(),
					NewClient: func(t *testing.T) idempotency.Store {
						return newStore(newClusterClient(t, cl.Addrs(), nil), nil).Idempotency()
					},
					Faults:   ps,
					Retained: idemRetained(newStore(dc, nil), dc),
				}
			},
			RateLimit: func(t *testing.T, _ *storetest.Clock) ratelimittest.Target {
				rlSeq++
				prefix := fmt.Sprintf("rltest:%d:%d:", time.Now().UnixNano(), rlSeq)
				ps, via := clusterProxies(t, cl)
				s := checked(t, newClusterClient(t, cl.Addrs(), via), &redisstore.Options{Prefix: prefix})
				return rateTarget(s, direct, prefix, ps)
			},
			Session: func(t *testing.T, _ *storetest.Clock) sessiontest.Target {
				prefix := "sessiontest:" + rand.Text()[:8] + ":"
				ps, via := clusterProxies(t, cl)
				s := checked(t, newClusterClient(t, cl.Addrs(), via), &redisstore.Options{Prefix: prefix})
				dc := newClusterClient(t, cl.Addrs(), nil)
				direct := newStore(dc, &redisstore.Options{Prefix: prefix})
				tg := sessiontest.Target{Store: s.Sessions(), Direct: direct.Sessions(), Faults: ps}
				sessionHooks(&tg, s, direct, dc)
				return tg
			},
			Schedule: func(t *testing.T, _ *storetest.Clock) scheduletest.Target {
				return schedTarget(t, func(t *testing.T) rueidis.Client { return newClusterClient(t, cl.Addrs(), nil) })
			},
		})
	})
	t.Run("GoRedis", func(t *testing.T) { storetest.Run(t, singleFactory(t, onGoRedis)) })
	// go-redis on Cluster runs the lease and session suites.
	t.Run("GoRedisCluster", func(t *testing.T) {
		own := testenv.RedisCluster(t) // restarted by the lease suite
		cl := testenv.SharedRedisCluster(t)
		storetest.Run(t, storetest.Factory{
			Lease: func(t *testing.T) leasetest.Target {
				ps, via := clusterProxies(t, own)
				s := checkedGo(t, newGoClusterClient(t, own.Addrs(), via), nil)
				direct := newGoStore(newGoClusterClient(t, own.Addrs(), nil), nil)
				dc := newClusterClient(t, own.Addrs(), nil)
				return leasetest.Target{
					Store:  s.Leases(),
					Direct: direct.Leases(),
					Faults: ps,
					Restart: func(t *testing.T) lease.Store {
						restartCluster(t, own)
						return newGoStore(newGoClusterClient(t, own.Addrs(), nil), nil).Leases()
					},
					Forget: func(t *testing.T) lease.Store {
						flushAll(t, own.Nodes()...)
						return direct.Leases()
					},
					Resource:    &resource{s: s, direct: direct, c: dc},
					Ended:       endedHooks(direct, dc),
					EndWatchers: s.EndWakes,
				}
			},
			Session: func(t *testing.T, _ *storetest.Clock) sessiontest.Target {
				prefix := "sessiontest:go:" + rand.Text()[:8] + ":"
				ps, via := clusterProxies(t, cl)
				s := checkedGo(t, newGoClusterClient(t, cl.Addrs(), via), &redisstore.Options{Prefix: prefix})
				dc := newClusterClient(t, cl.Addrs(), nil)
				direct := newGoStore(newGoClusterClient(t, cl.Addrs(), nil), &redisstore.Options{Prefix: prefix})
				tg := sessiontest.Target{Store: s.Sessions(), Direct: direct.Sessions(), Faults: ps}
				sessionHooks(&tg, s, direct, dc)
				return tg
			},
		})
	})
}

// client is one of the two Redis clients the store runs on.
type client struct {
	tag string // in key prefixes, so the two never share keys
	// proxied returns a checked store on a client fit for the faulty
	// proxy at addr.
	proxied func(t testing.TB, addr string, o *redisstore.Options) *redisstore.Store
	// plain returns a store on a client of its own to addr.
	plain func(t testing.TB, addr string, o *redisstore.Options) *redisstore.Store
}

var (
	onRueidis = client{
		proxied: func(t testing.TB, addr string, o *redisstore.Options) *redisstore.Store {
			return checked(t, newProxiedClient(t, addr), o)
		},
		plain: func(t testing.TB, addr string, o *redisstore.Options) *redisstore.Store {
			return newRedis(t, newClient(t, addr), o)
		},
	}
	onGoRedis = client{
		tag: "go:",
		proxied: func(t testing.TB, addr string, o *redisstore.Options) *redisstore.Store {
			return checkedGo(t, newGoClient(t, addr), o)
		},
		plain: func(t testing.TB, addr string, o *redisstore.Options) *redisstore.Store {
			return newGoRedis(t, newGoClient(t, addr), o)
		},
	}
)

// singleFactory runs every suite on a single node through c: the lease
// suite on a fresh server per case, the others on the shared one.
func singleFactory(t *testing.T, c client) storetest.Factory {
	srv := testenv.SharedRedis(t)
	direct := newClient(t, srv.Addr())
	return storetest.Factory{
		Lease: func(t *testing.T) leasetest.Target {
			srv := testenv.Redis(t, nil)
			p := testenv.NewProxy(t, srv.Addr())
			s := c.proxied(t, p.Addr(), nil)
			direct := c.plain(t, srv.Addr(), nil)
			dc := newClient(t, srv.Addr())
			return leasetest.Target{
				Store:  s.Leases(),
				Direct: direct.Leases(),
				Faults: p,
				Restart: func(t *testing.T) lease.Store {
					srv.Restart(t)
					return c.plain(t, srv.Addr(), nil).Leases()
				},
				Forget: func(t *testing.T) lease.Store {
					flushAll(t, srv)
					return direct.Leases()
				},
				Resource:    &resource{s: s, direct: direct, c: dc},
				Ended:       endedHooks(direct, dc),
				EndWatchers: s.EndWakes,
			}
		},
		Idempotency: func(t *testing.T) idempotencytest.Target {
			p := testenv.NewProxy(t, srv.Addr())
			return idempotencytest.Target{
				Store:  c.proxied(t, p.Addr(), nil).Idempotency(),
				Direct: c.plain(t, srv.Addr(), nil).Idempotency(),
				NewClient: func(t *testing.T) idempotency.Store {
					return c.plain(t, srv.Addr(), nil).Idempotency()
				},
				Faults:   p,
				Retained: idemRetained(newStore(direct, nil), direct),
			}
		},
		RateLimit: func(t *testing.T, _ *storetest.Clock) ratelimittest.Target {
			rlSeq++
			prefix := fmt.Sprintf("rltest:%s%d:%d:", c.tag, time.Now().UnixNano(), rlSeq)
			p := testenv.NewProxy(t, srv.Addr())
			s := c.proxied(t, p.Addr(), &redisstore.Options{Prefix: prefix})
			return rateTarget(s, direct, prefix, p)
		},
		Session: func(t *testing.T, _ *storetest.Clock) sessiontest.Target {
			prefix := "sessiontest:" + c.tag + rand.Text()[:8] + ":"
			p := testenv.NewProxy(t, srv.Addr())
			s := c.proxied(t, p.Addr(), &redisstore.Options{Prefix: prefix})
			dc := newClient(t, srv.Addr())
			direct := c.plain(t, srv.Addr(), &redisstore.Options{Prefix: prefix})
			tg := sessiontest.Target{Store: s.Sessions(), Direct: direct.Sessions(), Faults: p}
			sessionHooks(&tg, s, direct, dc)
			tg.Dump = func(t *testing.T) string { return dumpKeys(t, dc, prefix) }
			return tg
		},
		Schedule: func(t *testing.T, _ *storetest.Clock) scheduletest.Target {
			return schedTargetOn(t, func(t *testing.T, o *redisstore.Options) *redisstore.Store {
				return c.plain(t, srv.Addr(), o)
			}, func(t *testing.T) rueidis.Client { return newClient(t, srv.Addr()) })
		},
	}
}

// idemRetained reaches the idempotency records of s on c: Redis expires
// them natively (Reclaim has nothing to do; the suite polls), and Records
// scans every node for the record keys of a scope.
func idemRetained(s *redisstore.Store, c rueidis.Client) *idempotencytest.Retained {
	return &idempotencytest.Retained{
		Reclaim: func(*testing.T) {},
		Records: func(t *testing.T, scope string) []string {
			// The key of the scope's record with an empty key, up to its
			// closing brace: the start of every record key of the scope.
			k := redisstore.IdempotencyKey(s, idempotency.ID{Scope: scope})
			start := strings.TrimSuffix(k, "}")
			ks, err := scanKeys(ctxT(t), c, globEscape(start))
			if err != nil {
				t.Fatalf("scan the records of %q: %v", scope, err)
			}
			var out []string
			for _, kt := range ks {
				out = append(out, strings.TrimSuffix(strings.TrimPrefix(kt.Key, start), "}"))
			}
			slices.Sort(out)
			return out
		},
	}
}
