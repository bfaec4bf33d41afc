package bench

import (
	"context"
	"errors"
	"fmt"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurekit/tenure/client"
	"github.com/tenurekit/tenure/internal/secret"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/server"
	"github.com/tenurekit/tenure/store/memstore"
	"github.com/tenurekit/tenure/store/redisstore"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

// The serve suites measure tenure serve: the same operation through the
// HTTP API (package client → loopback HTTP with keep-alive → package
// server → the store) and through the library directly, on the same store
// value in the same process.
//
//   - serve-redis-lease, serve-sqlite-lease: the lease cycle (Acquire with
//     a fresh token, then Release) on lease.Store: contender tenure is
//     client.New(...).Leases(), contender direct is the store's own view.
//   - serve-redis-rate, serve-sqlite-rate: one GCRA decision
//     (ratelimit.Limiter.Allow, a million per second, so every decision
//     writes) on the client's Limits() view against the store's.
//
// The server is built as tenure serve builds it: server.New with one
// token allowed everything, the API's own per-token limit on an in-process
// memstore (at a rate no run reaches, so it is paid but never refuses), a
// text logger (writing to io.Discard: its formatting is paid, not a
// terminal), on a real listener on 127.0.0.1:0 with the configured
// timeouts. The client's transport keeps MaxWorkers+ idle connections to
// the server, so every worker keeps its own connection alive.
//
// Besides throughput and CPU per cycle (the process: benchmark, client and
// server; redis-server from INFO cpu), the suites report the median and
// the 99th percentile of the latency of one store call (one request over
// serve): LatencyP50Metric and LatencyP99Metric.
//
// A third contender, http-floor, sends one HTTP request per store call over
// the same kind of client transport to a handler that reads the body and
// answers a fixed JSON body of the same size as serve's, with no token,
// store or log: what Go's net/http alone costs over loopback, the floor
// under serve's figures.
var ServeContenders = []string{"tenure", "direct", "http-floor"}

// ServeRateContenders are the contenders of the serve rate suites: those
// of every serve suite, tenure serve's Envoy rate limit service (see
// rls.go) and gubernator (see gubernator.go).
var ServeRateContenders = append(slices.Clip(ServeContenders), "tenure-rls", "gubernator")

// ServeRedisRateContenders are the contenders of serve-redis-rate: those
// of the serve rate suites and envoyproxy/ratelimit on the same Redis (see
// envoyratelimit.go).
var ServeRedisRateContenders = append(slices.Clip(ServeRateContenders), "envoy-ratelimit")

// Latency metrics of the serve suites: percentiles of one store call
// (acquire or release, or one decision), in microseconds.
const (
	LatencyP50Metric = "p50-µs/call"
	LatencyP99Metric = "p99-µs/call"
)

// serveToken is the bearer token of the benchmark's server.
const serveToken = "bench-serve-token-0123456789abcdef"

// serveAPIRate is the API's own per-token limit in the benchmark: on, so
// that its cost is measured, and far above what a run reaches.
const serveAPIRate = 10_000_000

// serveParts returns the store and the operation of a serve suite.
func serveParts(suite string) (store, op string) {
	store, op, _ = strings.Cut(strings.TrimPrefix(suite, "serve-"), "-")
	return store, op
}

func init() {
	for _, s := range []struct{ store, op string }{
		{"redis", "lease"}, {"redis", "rate"}, {"sqlite", "lease"}, {"sqlite", "rate"},
	} {
		suite := "serve-" + s.store + "-" + s.op
		contenders := ServeContenders
		switch {
		case s.op == "rate" && s.store == "redis":
			contenders = ServeRedisRateContenders
		case s.op == "rate":
			contenders = ServeRateContenders
		}
		registerSuite(suite, suiteFuncs{
			contenders: contenders,
			cycle: func(e *Env, b *testing.B, contender string, workers int) {
				e.ServeCycle(b, s.store, s.op, contender, workers)
			},
			prepare: func(e *Env, contender string) error {
				_, err := e.serveCycle(s.store, s.op, contender)
				return err
			},
			server: func(e *Env) string {
				if s.store == "redis" {
					return e.Server("redis") + "; tenure serve in process on 127.0.0.1"
				}
				return "SQLite (sqlitestore.Open on a temporary file, WAL); tenure serve in process on 127.0.0.1"
			},
		})
	}
}

// serveEnvs holds each Env's serve setup (*Env -> *serveEnv).
var serveEnvs sync.Map

type serveEnv struct {
	mu    sync.Mutex
	built map[string]*serveStore // store name -> its views
}

// serveStore is one store with tenure serve in front of it.
type serveStore struct {
	leases, leasesServe lease.Store
	client              *client.Client // the Go client of the server in front
	rate, rateServe     *ratelimit.Limiter
	floor               func(ctx context.Context) error             // one request to the floor server
	rls                 func(ctx context.Context, key string) error // one decision through serve's rate limit service
}

// timedCycle is one cycle that reports the latency of each store call it
// makes through rec.
type timedCycle func(ctx context.Context, key string, rec func(time.Duration)) error

func (e *Env) serveStore(store string) (*serveStore, error) {
	v, _ := serveEnvs.LoadOrStore(e, &serveEnv{built: map[string]*serveStore{}})
	se := v.(*serveEnv)
	se.mu.Lock()
	defer se.mu.Unlock()
	if s, ok := se.built[store]; ok {
		return s, nil
	}
	s, err := e.buildServeStore(store)
	if err != nil {
		return nil, err
	}
	se.built[store] = s
	return s, nil
}

func (e *Env) buildServeStore(store string) (*serveStore, error) {
	ctx := context.Background()
	var views server.Stores
	switch store {
	case "redis":
		r, err := e.Redis()
		if err != nil {
			return nil, err
		}
		st, err := redisstore.New(r.rueidis, &redisstore.Options{Prefix: "bench:serve:"})
		if err != nil {
			return nil, err
		}
		if err := st.Check(ctx); err != nil {
			return nil, fmt.Errorf("redisstore check: %w", err)
		}
		views = server.Stores{Leases: st.Leases(), Limits: st.Limits()}
	case "sqlite":
		dir, err := os.MkdirTemp("", "tenure-bench-serve-")
		if err != nil {
			return nil, err
		}
		e.tb.Cleanup(func() { os.RemoveAll(dir) })
		st, err := sqlitestore.Open(ctx, filepath.Join(dir, "tenure.db"), nil)
		if err != nil {
			return nil, fmt.Errorf("sqlitestore: %w", err)
		}
		e.tb.Cleanup(func() { st.Close() })
		views = server.Stores{Leases: st.Leases(), Limits: st.Limits()}
	default:
		return nil, fmt.Errorf("bench: unknown serve store %q", store)
	}
	cfg := server.AdminConfig(secret.New(serveToken))
	cfg.Rate, cfg.Period, cfg.Burst = serveAPIRate, time.Second, serveAPIRate
	cfg.MaxWaits = 4 * MaxWorkers // the hand-off through serve keeps every worker waiting
	apiLimits, err := memstore.New(nil)
	if err != nil {
		return nil, err
	}
	// As tenure serve: an OpenTelemetry SDK records every instrument (its
	// reader does not matter to what recording costs), and the access log
	// is sampled.
	srv, err := server.New(views, &server.Options{
		Config:        cfg,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		APILimits:     apiLimits.Limits(),
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())),
		AccessLog:     server.AccessLogSampled,
	})
	if err != nil {
		return nil, fmt.Errorf("server.New: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	hs := srv.HTTPServer(ln.Addr().String())
	go hs.Serve(ln)
	e.tb.Cleanup(func() {
		srv.Drain()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hs.Shutdown(sctx)
	})
	c, err := client.New("http://"+ln.Addr().String(), &client.Options{Token: serveToken, HTTPClient: e.serveHTTPClient()})
	if err != nil {
		return nil, err
	}
	floor, err := e.startFloor()
	if err != nil {
		return nil, err
	}
	limit := ratelimit.Limit{Name: "serve", Rate: benchRate, Period: time.Second}
	s := &serveStore{leases: views.Leases, leasesServe: c.Leases(), client: c, floor: floor}
	if s.rls, err = e.startRLS(views.Limits); err != nil {
		return nil, fmt.Errorf("tenure serve's rate limit service: %w", err)
	}
	if s.rate, err = ratelimit.New(views.Limits, ratelimit.GCRA, limit, nil); err != nil {
		return nil, err
	}
	if s.rateServe, err = ratelimit.New(c.Limits(), ratelimit.GCRA, limit, nil); err != nil {
		return nil, err
	}
	// Open MaxWorkers connections to the server and warm the scripts, so
	// that the first measured run does not pay for them.
	var wg sync.WaitGroup
	errs := make([]error, MaxWorkers)
	for i := range MaxWorkers {
		wg.Go(func() {
			if _, errs[i] = s.rateServe.Allow(ctx, fmt.Sprintf("warm:%d", i)); errs[i] == nil {
				errs[i] = s.floor(ctx)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("tenure serve: %w", err)
	}
	for _, st := range []lease.Store{s.leases, s.leasesServe} {
		tok := lease.NewToken()
		if _, err := st.Acquire(ctx, "bench:serve:warm", tok, TTL); err != nil {
			return nil, err
		}
		if err := st.Release(ctx, "bench:serve:warm", tok); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// serveHTTPClient returns an HTTP client tuned for the benchmark: every
// worker keeps a connection of its own alive.
func (e *Env) serveHTTPClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 4 * MaxWorkers
	tr.MaxIdleConnsPerHost = 2 * MaxWorkers
	tr.DisableCompression = true
	tr.ForceAttemptHTTP2 = false
	e.tb.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// floorRequest and floorAnswer are about the size of a lease acquire and
// its grant on the wire.
const (
	floorRequest = `{"key":"bench:serve-redis-lease:http-floor:12:345","token":"N3RZ5AHBF4QKZEXAMPLE2WOLAJ","ttl":"10s"}`
	floorAnswer  = `{"fence":1764602791000001,"ttl":"10s","token":"N3RZ5AHBF4QKZEXAMPLE2WOLAJ"}` + "\n"
)

// startFloor starts the floor server (see ServeContenders) and returns one
// request to it.
func (e *Env) startFloor() (func(ctx context.Context) error, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, floorAnswer)
	})}
	go hs.Serve(ln)
	e.tb.Cleanup(func() { hs.Close() })
	hc := e.serveHTTPClient()
	url := "http://" + ln.Addr().String() + "/v1/leases/acquire"
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(floorRequest))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		// As package client sends its requests: to the transport.
		resp, err := hc.Transport.RoundTrip(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("floor server: %s", resp.Status)
		}
		return nil
	}, nil
}

// serveCycle returns the timed cycle of contender (tenure: through serve;
// direct: the store's view) for op (lease or rate) on store.
func (e *Env) serveCycle(store, op, contender string) (timedCycle, error) {
	s, err := e.serveStore(store)
	if err != nil {
		return nil, err
	}
	var (
		ls  lease.Store
		lim *ratelimit.Limiter
	)
	switch contender {
	case "tenure":
		ls, lim = s.leasesServe, s.rateServe
	case "direct":
		ls, lim = s.leases, s.rate
	case "http-floor":
		calls := 1
		if op == "lease" {
			calls = 2
		}
		return func(ctx context.Context, key string, rec func(time.Duration)) error {
			for range calls {
				t0 := time.Now()
				if err := s.floor(ctx); err != nil {
					return err
				}
				rec(time.Since(t0))
			}
			return nil
		}, nil
	case "tenure-rls", "gubernator", "envoy-ratelimit":
		var decide func(ctx context.Context, key string) error
		switch {
		case op != "rate":
			return nil, fmt.Errorf("bench: %s has no %s operation", contender, op)
		case contender == "tenure-rls":
			decide = s.rls
		case contender == "gubernator":
			decide, err = e.gubernatorDecide()
		case store != "redis":
			return nil, fmt.Errorf("bench: envoyproxy/ratelimit runs on Redis only, not %s", store)
		default:
			decide, err = e.envoyRatelimitDecide()
		}
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, key string, rec func(time.Duration)) error {
			t0 := time.Now()
			err := decide(ctx, key)
			rec(time.Since(t0))
			return err
		}, nil
	default:
		return nil, fmt.Errorf("bench: unknown serve contender %q", contender)
	}
	switch op {
	case "lease":
		return func(ctx context.Context, key string, rec func(time.Duration)) error {
			tok := lease.NewToken()
			t0 := time.Now()
			if _, err := ls.Acquire(ctx, key, tok, TTL); err != nil {
				return err
			}
			t1 := time.Now()
			rec(t1.Sub(t0))
			err := ls.Release(ctx, key, tok)
			rec(time.Since(t1))
			return err
		}, nil
	case "rate":
		return func(ctx context.Context, key string, rec func(time.Duration)) error {
			t0 := time.Now()
			_, err := lim.Allow(ctx, key)
			rec(time.Since(t0))
			return err
		}, nil
	}
	return nil, fmt.Errorf("bench: unknown serve operation %q", op)
}

// ServeCycle measures contender of the serve suite of op on store with
// workers concurrent workers. It skips b when the store's server is not
// installed.
func (e *Env) ServeCycle(b *testing.B, store, op, contender string, workers int) {
	tc, err := e.serveCycle(store, op, contender)
	if errors.Is(err, ErrSkipped) {
		b.Skip(err)
	}
	if err != nil {
		b.Fatal(err)
	}
	var serverCPU func(context.Context) (time.Duration, error)
	if store == "redis" {
		r, _ := e.Redis()
		serverCPU = r.cpu
	}
	runTimedCycles(b, "serve-"+store+"-"+op+":"+contender, workers, tc, serverCPU)
}

// runTimedCycles is runCycles for timed cycles: it also reports the median
// and the 99th percentile of the latency of one store call.
func runTimedCycles(b *testing.B, namespace string, workers int, tc timedCycle, serverCPU func(context.Context) (time.Duration, error)) {
	lats := make([][]time.Duration, workers)
	nw := func(w int) cycleFunc {
		rec := func(d time.Duration) { lats[w] = append(lats[w], d) }
		return func(ctx context.Context, key string) error { return tc(ctx, key, rec) }
	}
	for w := range lats {
		lats[w] = make([]time.Duration, 0, 2*b.N/workers+16)
	}
	runCycles(b, namespace, workers, nw, serverCPU)
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	if len(all) == 0 {
		return
	}
	slices.Sort(all)
	pct := func(p float64) float64 {
		i := int(p * float64(len(all)-1))
		return float64(all[i]) / float64(time.Microsecond)
	}
	b.ReportMetric(pct(0.50), LatencyP50Metric)
	b.ReportMetric(pct(0.99), LatencyP99Metric)
}
