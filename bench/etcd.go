package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/etcdstore"
)

// EtcdEnv names an etcd endpoint (http://host:port) to use instead of
// starting a throwaway etcd.
const EtcdEnv = "TENURE_BENCH_ETCD"

// The etcd suite measures the lease cycle (acquire a free key with a 10 s
// TTL, release it) on one etcd:
//
//   - tenure: etcdstore through lease.Store, Acquire with a fresh token and
//     Release.
//   - tenure-locker: the same store through lease.Locker (TryAcquire,
//     Lease.Release).
//   - mutex: etcd's own client/v3/concurrency.Mutex, all locks on one
//     Session (one etcd lease of 10 s that the client keeps alive):
//     TryLock, then Unlock. Its locks have no expiry of their own: a key
//     lives as long as the session, whatever its holder does.
//
// Next to the throughput and CPU per cycle (etcd's own, from its
// process_cpu_seconds_total), it reports the Raft proposals etcd
// committed per cycle (etcd_server_proposals_committed_total): every
// write (txn with a put or delete, lease grant, lease revoke) is one.
var EtcdContenders = []string{"tenure", "tenure-locker", "mutex"}

// RaftMetric is the number of Raft proposals etcd committed per cycle.
const RaftMetric = "raft-writes/cycle"

func init() {
	registerSuite("etcd", suiteFuncs{
		contenders: EtcdContenders,
		cycle: func(e *Env, b *testing.B, contender string, workers int) {
			e.EtcdCycle(b, contender, workers)
		},
		prepare: func(e *Env, contender string) error {
			_, err := e.etcdCycle(contender)
			return err
		},
		server: func(e *Env) string {
			ec, err := e.Etcd()
			if err != nil {
				return err.Error()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			st, err := ec.client.Status(ctx, ec.endpoint)
			if err != nil {
				return err.Error()
			}
			return fmt.Sprintf("etcd %s on %s (one member)", st.Version, ec.endpoint)
		},
	})
}

// etcdEnvs holds each Env's etcd (*Env -> *etcdEnv).
var etcdEnvs sync.Map

type etcdEnv struct {
	once sync.Once
	ec   *etcdClients
	err  error

	contOnce sync.Once
	cs       map[string]newWorker
	contErr  error
}

type etcdClients struct {
	endpoint string
	client   *clientv3.Client
}

func (e *Env) etcdEnv() *etcdEnv {
	v, _ := etcdEnvs.LoadOrStore(e, &etcdEnv{})
	return v.(*etcdEnv)
}

// Etcd returns the etcd client, starting a server on first use.
func (e *Env) Etcd() (*etcdClients, error) {
	ee := e.etcdEnv()
	ee.once.Do(func() { ee.ec, ee.err = e.startEtcd() })
	return ee.ec, ee.err
}

func (e *Env) startEtcd() (*etcdClients, error) {
	ep := os.Getenv(EtcdEnv)
	if ep == "" {
		err := e.tb.run(func(t testing.TB) { ep = testenv.Etcd(t).Endpoints()[0] })
		if err != nil {
			return nil, fmt.Errorf("start etcd: %w", err)
		}
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("etcd client for %s: %w", ep, err)
	}
	e.tb.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Get(ctx, "bench:ping"); err != nil {
		return nil, fmt.Errorf("etcd client for %s: %w", ep, err)
	}
	return &etcdClients{endpoint: ep, client: c}, nil
}

func (e *Env) etcdContenders() (map[string]newWorker, error) {
	ee := e.etcdEnv()
	ee.contOnce.Do(func() { ee.cs, ee.contErr = e.buildEtcdContenders() })
	return ee.cs, ee.contErr
}

func (e *Env) buildEtcdContenders() (map[string]newWorker, error) {
	ec, err := e.Etcd()
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	st, err := etcdstore.New(ec.client, &etcdstore.Options{Prefix: "bench/tenure/"})
	if err != nil {
		return nil, err
	}
	leases := st.Leases()
	locker, err := lease.New(leases, nil)
	if err != nil {
		return nil, err
	}
	sess, err := concurrency.NewSession(ec.client, concurrency.WithTTL(int(TTL/time.Second)))
	if err != nil {
		return nil, fmt.Errorf("etcd session: %w", err)
	}
	e.tb.Cleanup(func() { sess.Close() })
	cs := map[string]newWorker{
		"tenure": func(int) cycleFunc {
			return func(ctx context.Context, key string) error {
				tok := lease.NewToken()
				if _, err := leases.Acquire(ctx, key, tok, TTL); err != nil {
					return err
				}
				return leases.Release(ctx, key, tok)
			}
		},
		"tenure-locker": func(int) cycleFunc {
			return func(ctx context.Context, key string) error {
				l, err := locker.TryAcquire(ctx, key, TTL)
				if err != nil {
					return err
				}
				return l.Release(ctx)
			}
		},
		"mutex": func(int) cycleFunc {
			return func(ctx context.Context, key string) error {
				m := concurrency.NewMutex(sess, "bench/mutex/"+key)
				if err := m.TryLock(ctx); err != nil {
					return err
				}
				return m.Unlock(ctx)
			}
		},
	}
	// One cycle each before measuring (connections, first lease).
	for name, nw := range cs {
		if err := nw(0)(ctx, "bench:warm"); err != nil {
			return nil, fmt.Errorf("etcd %s: %w", name, err)
		}
	}
	return cs, nil
}

func (e *Env) etcdCycle(contender string) (newWorker, error) {
	cs, err := e.etcdContenders()
	if err != nil {
		return nil, err
	}
	nw, ok := cs[contender]
	if !ok {
		return nil, fmt.Errorf("bench: unknown etcd contender %q", contender)
	}
	return nw, nil
}

// EtcdCycle measures the lease cycle of contender on etcd with workers
// concurrent workers. It skips b when etcd is not installed.
func (e *Env) EtcdCycle(b *testing.B, contender string, workers int) {
	nw, err := e.etcdCycle(contender)
	if errors.Is(err, ErrSkipped) {
		b.Skip(err)
	}
	if err != nil {
		b.Fatal(err)
	}
	ec, _ := e.Etcd()
	ctx := context.Background()
	raft0, rerr := ec.metric(ctx, "etcd_server_proposals_committed_total")
	runCycles(b, "etcd:"+contender, workers, nw, ec.cpu)
	// Background revocations of the last cycles may still be on their way.
	time.Sleep(50 * time.Millisecond)
	if raft1, err := ec.metric(ctx, "etcd_server_proposals_committed_total"); err == nil && rerr == nil {
		b.ReportMetric((raft1-raft0)/float64(b.N), RaftMetric)
	}
}

// cpu returns the CPU time etcd has used (process_cpu_seconds_total).
func (ec *etcdClients) cpu(ctx context.Context) (time.Duration, error) {
	s, err := ec.metric(ctx, "process_cpu_seconds_total")
	return time.Duration(s * float64(time.Second)), err
}

// metric reads one unlabelled metric from etcd's /metrics.
func (ec *etcdClients) metric(ctx context.Context, name string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ec.endpoint+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("bench: etcd /metrics has no %s", name)
}
