package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/etcdstore"
)

func TestMain(m *testing.M) {
	// etcd also reads each flag from ETCD_<FLAG>, and the servers testenv
	// starts inherit this environment. With a 100ms heartbeat and a 600ms
	// election timeout, etcd's minimum lease TTL (1.5 election timeouts,
	// rounded up to whole seconds) is 1s instead of 2s, which halves the
	// time the expiry tests wait. Tests probe the minimum rather than
	// assume it (see minTTL).
	for k, v := range map[string]string{"ETCD_HEARTBEAT_INTERVAL": "100", "ETCD_ELECTION_TIMEOUT": "600"} {
		if _, ok := os.LookupEnv(k); !ok {
			os.Setenv(k, v)
		}
	}
	testenv.Main(m)
}

// newClient returns a client for eps that reconnects quickly (gRPC backoff
// capped at 200ms), so that a healed proxy or a restarted server is noticed
// at once. It is closed when the test ends.
func newClient(t testing.TB, eps ...string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   eps,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  20 * time.Millisecond,
				Multiplier: 1.6,
				Jitter:     0.2,
				MaxDelay:   200 * time.Millisecond,
			},
			MinConnectTimeout: 2 * time.Second,
		})},
	})
	if err != nil {
		t.Fatalf("etcd client for %v: %v", eps, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// hostPort strips the scheme from an endpoint URL.
func hostPort(ep string) string { return strings.TrimPrefix(ep, "http://") }

// minTTL asks etcd for a 1s lease and returns what it granted: the
// shortest TTL it grants exactly.
func minTTL(t testing.TB, c *clientv3.Client) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g, err := c.Grant(ctx, 1)
	if err != nil {
		t.Fatalf("probe grant: %v", err)
	}
	if _, err := c.Revoke(ctx, g.ID); err != nil {
		t.Fatalf("probe revoke: %v", err)
	}
	return time.Duration(g.TTL) * time.Second
}

// uniquePrefix returns a key prefix of the running test's own.
func uniquePrefix(t testing.TB) string {
	return fmt.Sprintf("test/%s/%d/", t.Name(), time.Now().UnixNano())
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// eventually retries op while it fails with lease.ErrUnavailable (a member
// went away, the client is failing over), for up to 30s.
func eventually[T any](t testing.TB, what string, op func(ctx context.Context) (T, error)) T {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		v, err := op(ctx)
		cancel()
		if err == nil {
			return v
		}
		if !errors.Is(err, lease.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitFree polls the store's own judgement until key is free.
func waitFree(t testing.TB, s lease.Store, key string, within time.Duration) lease.Info {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		info, err := s.Inspect(ctxT(t), key)
		if err != nil {
			t.Fatalf("Inspect(%q): %v", key, err)
		}
		if !info.Held {
			return info
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q still held after %v: %+v", key, within, info)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// resource adapts FencedPut/FencedGet for the conformance suite. Its plain
// writes go straight to the same etcd key without the guard: the negative
// control.
type resource struct {
	s      *etcdstore.Store
	c      *clientv3.Client
	prefix string
}

// HolderWrite writes through the holder check: Compare in the txn of the
// write.
func (r *resource) HolderWrite(ctx context.Context, l *lease.Lease, name, v string) error {
	resp, err := r.c.Txn(ctx).If(r.s.Compare(l)).Then(clientv3.OpPut(r.prefix+"res/"+name, v)).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return lease.ErrNotHeld
	}
	return nil
}

func (r *resource) FencedWrite(ctx context.Context, name string, f uint64, v string) error {
	return r.s.FencedPut(ctx, name, v, f)
}

func (r *resource) PlainWrite(ctx context.Context, name, v string) error {
	_, err := r.c.Put(ctx, r.prefix+"res/"+name, v)
	return err
}

func (r *resource) Read(ctx context.Context, name string) (string, error) {
	v, _, err := r.s.FencedGet(ctx, name)
	return v, err
}
