package client_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/rueidis"

	"github.com/tenurekit/tenure/client"
	"github.com/tenurekit/tenure/cmd/tenure/internal/servestore"
	"github.com/tenurekit/tenure/election/electiontest"
	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/idempotency/idempotencytest"
	"github.com/tenurekit/tenure/internal/fencedkv"
	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/lease/leasetest"
	"github.com/tenurekit/tenure/server"
	"github.com/tenurekit/tenure/session/sessiontest"
	"github.com/tenurekit/tenure/store/redisstore"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// spread is a RoundTripper that sends each request to the next of several
// tenure serve instances in turn, so that one client's calls (and the
// suite's concurrent callers) land on every instance.
type spread struct {
	inner http.RoundTripper
	hosts []string
	n     atomic.Uint64
}

func (s *spread) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	r.URL.Host = s.hosts[s.n.Add(1)%uint64(len(s.hosts))]
	r.Host = r.URL.Host
	return s.inner.RoundTrip(r)
}

// spreadClient returns a client whose requests alternate between urls,
// behind faults when f is not nil.
func spreadClient(t testing.TB, urls []string, f *faults) *client.Client {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	sp := &spread{inner: tr}
	for _, u := range urls {
		pu, _ := url.Parse(u)
		sp.hosts = append(sp.hosts, pu.Host)
	}
	var rt http.RoundTripper = sp
	if f != nil {
		f.inner = sp
		rt = f
	}
	c, err := client.New(urls[0], &client.Options{Token: testToken, HTTPClient: &http.Client{Transport: rt}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// pgServe is tenure serve over one PostgreSQL database, as a separate
// process would run it: its own pool and store.
func pgServe(t testing.TB, dsn string) (string, *fencedkv.KV, func()) {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := newPG(t, pool, nil)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close() })
	kv, err := fencedkv.New(context.Background(), db, fencedkv.Postgres, `"tenure"."tenure_serve_values"`, s)
	if err != nil {
		t.Fatal(err)
	}
	sv, err := fencedkv.NewSessionKV(context.Background(), db, fencedkv.Postgres, `"tenure"."tenure_session_values"`, s)
	if err != nil {
		t.Fatal(err)
	}
	u, stop := serve(t, server.Stores{Leases: s.Leases(), Idempotency: s.Idempotency(), Limits: s.Limits(),
		Sessions: s.Sessions(), Schedules: s.Schedules(), Fenced: kv, SessionValues: sv}, nil)
	return u, kv, stop
}

func pgDatabase(t testing.TB) string {
	t.Helper()
	dsn := testenv.SharedPostgres(t).NewDatabase(t)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := newPG(t, pool, nil).Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return dsn
}

// TestLeaseConformanceTwoInstancesPostgres runs the lease suite against two
// tenure serve instances over one PostgreSQL database, every client's
// requests alternating between them; Restart replaces both instances.
func TestLeaseConformanceTwoInstancesPostgres(t *testing.T) {
	dsn := pgDatabase(t)
	leasetest.Run(t, func(t *testing.T) leasetest.Target {
		a, kv, stopA := pgServe(t, dsn)
		b, _, stopB := pgServe(t, dsn)
		f := &faults{}
		direct := spreadClient(t, []string{b, a}, nil)
		return leasetest.Target{
			Store:  spreadClient(t, []string{a, b}, f).Leases(),
			Direct: direct.Leases(),
			Faults: f,
			Restart: func(t *testing.T) lease.Store {
				stopA()
				stopB()
				a2, _, _ := pgServe(t, dsn)
				b2, _, _ := pgServe(t, dsn)
				return spreadClient(t, []string{a2, b2}, nil).Leases()
			},
			Resource: resource{c: newClient(t, b, nil), plain: kv.PlainWrite},
			Unit:     unit,
		}
	})
}

// TestElectionConformanceTwoInstancesPostgres runs the election suite
// against two tenure serve instances over one PostgreSQL database, every
// client's requests alternating between them.
func TestElectionConformanceTwoInstancesPostgres(t *testing.T) {
	dsn := pgDatabase(t)
	electiontest.Run(t, func(t *testing.T) leasetest.Target {
		a, _, _ := pgServe(t, dsn)
		b, _, _ := pgServe(t, dsn)
		f := &faults{}
		return leasetest.Target{
			Store:  spreadClient(t, []string{a, b}, f).Leases(),
			Direct: spreadClient(t, []string{b, a}, nil).Leases(),
			Faults: f,
			Unit:   unit,
		}
	})
}

// redisServe is tenure serve over one Redis server with its own client.
func redisServe(t testing.TB, addr, prefix string) (string, *redisstore.Store, func()) {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableRetry: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	s := newRedis(t, c, &redisstore.Options{Prefix: prefix})
	u, stop := serve(t, server.Stores{Leases: s.Leases(), Idempotency: s.Idempotency(), Limits: s.Limits(),
		Sessions: s.Sessions(), Schedules: s.Schedules(), Fenced: servestore.FencedValues(s), SessionValues: servestore.RedisSessionValues(s)}, nil)
	return u, s, stop
}

var prefixSeq atomic.Int64

// TestLeaseConformanceTwoInstancesRedis runs the lease suite against two
// tenure serve instances over one Redis server, every client's requests
// alternating between them.
func TestLeaseConformanceTwoInstancesRedis(t *testing.T) {
	r := testenv.SharedRedis(t)
	leasetest.Run(t, func(t *testing.T) leasetest.Target {
		prefix := fmt.Sprintf("serve%d:", prefixSeq.Add(1))
		a, _, stopA := redisServe(t, r.Addr(), prefix)
		rc := redisClient(t, r.Addr())
		b, _, stopB := redisServe(t, r.Addr(), prefix)
		f := &faults{}
		return leasetest.Target{
			Store:  spreadClient(t, []string{a, b}, f).Leases(),
			Direct: spreadClient(t, []string{b, a}, nil).Leases(),
			Faults: f,
			Restart: func(t *testing.T) lease.Store {
				stopA()
				stopB()
				a2, _, _ := redisServe(t, r.Addr(), prefix)
				b2, _, _ := redisServe(t, r.Addr(), prefix)
				return spreadClient(t, []string{a2, b2}, nil).Leases()
			},
			Resource: resource{c: newClient(t, b, nil), plain: func(ctx context.Context, name string, v []byte) error {
				// The unguarded write: the value key, around the fence script.
				return redisPlainSet(ctx, rc, prefix, name, v)
			}},
			Unit: unit,
		}
	})
}

// TestIdempotencyConformancePostgres runs the idempotency suite against
// serve on PostgreSQL, each extra client on an instance of its own.
func TestIdempotencyConformancePostgres(t *testing.T) {
	dsn := pgDatabase(t)
	idempotencytest.Run(t, func(t *testing.T) idempotencytest.Target {
		a, _, _ := pgServe(t, dsn)
		f := &faults{}
		return idempotencytest.Target{
			Store:  newClient(t, a, f).Idempotency(),
			Direct: newClient(t, a, nil).Idempotency(),
			NewClient: func(t *testing.T) idempotency.Store {
				u, _, _ := pgServe(t, dsn)
				return newClient(t, u, nil).Idempotency()
			},
			Faults: f,
			Unit:   claimUnit,
		}
	})
}

// TestSessionConformanceRedis runs the session suite against serve on
// Redis (the store's real clock).
func TestSessionConformanceRedis(t *testing.T) {
	r := testenv.SharedRedis(t)
	sessiontest.Run(t, func(t *testing.T) sessiontest.Target {
		prefix := fmt.Sprintf("serve%d:", prefixSeq.Add(1))
		a, direct, _ := redisServe(t, r.Addr(), prefix)
		b, _, _ := redisServe(t, r.Addr(), prefix)
		f := &faults{}
		return sessiontest.Target{
			Store:  newClient(t, a, f).Sessions(),
			Direct: newClient(t, b, nil).Sessions(),
			Faults: f,
			Unit:   claimUnit,
			Commit: sessionCommitter{hc: &http.Client{Transport: f}, url: a, read: direct.SessionGet},
		}
	})
}

// redisPlainSet writes the value key of a fenced value around the fence
// script (names here hold no '%', '{' or '}', which the store escapes).
func redisPlainSet(ctx context.Context, c rueidis.Client, prefix, name string, v []byte) error {
	return c.Do(ctx, c.B().Set().Key(prefix+"{"+name+"}:value").Value(rueidis.BinaryString(v)).Build()).Error()
}
