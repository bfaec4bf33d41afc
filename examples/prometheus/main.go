// Command prometheus serves tenure's OpenTelemetry metrics on /metrics with
// the OpenTelemetry Prometheus exporter, while a small workload takes
// leases, runs idempotent requests, checks rate limits and loads sessions
// on the memory store and on an embedded SQLite file.
//
// tenure's components use the global OpenTelemetry providers unless their
// Options name others, so installing the SDK once (otel.SetMeterProvider)
// is all a service does to get tenure's signals:
//
//	go run ./examples/prometheus -addr 127.0.0.1:9464
//	curl -s 127.0.0.1:9464/metrics | grep ^tenure_
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/session"
	"github.com/tenurekit/tenure/store/memstore"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9464", "address to serve /metrics on")
	every := flag.Duration("every", time.Second, "how often the workload runs")
	flag.Parse()

	handler, shutdown, err := Install()
	if err != nil {
		log.Fatal(err)
	}
	defer shutdown(context.Background())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	dir, err := os.MkdirTemp("", "tenure-metrics-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	w, err := NewWorkload(ctx, filepath.Join(dir, "tenure.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	go func() {
		for ctx.Err() == nil {
			if err := w.Run(ctx); err != nil && ctx.Err() == nil {
				log.Print(err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(*every):
			}
		}
	}()

	mux := http.NewServeMux()
	mux.Handle("/metrics", handler)
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Shutdown(context.Background())
	}()
	log.Printf("serving tenure's metrics on http://%s/metrics", *addr)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}

// Install makes an OpenTelemetry SDK MeterProvider that the Prometheus
// exporter reads, installs it as the global provider, and returns the
// /metrics handler. The exporter's name translation is set explicitly, so
// the exposed names (tenure_lease_acquires_total,
// tenure_store_duration_seconds, ...) do not move with its default.
func Install() (http.Handler, func(context.Context) error, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(
		otelprom.WithRegisterer(reg),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
	)
	if err != nil {
		return nil, nil, err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	otel.SetMeterProvider(mp)
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), mp.Shutdown, nil
}

// Workload is a round of real operations on the memory store and on a
// SQLite file, through components made with default Options (they use the
// global providers).
type Workload struct {
	sqlite *sqlitestore.Store
	mem    *memstore.Store
	round  int
}

// NewWorkload opens the SQLite file at path and a memory store.
func NewWorkload(ctx context.Context, path string) (*Workload, error) {
	db, err := sqlitestore.Open(ctx, path, nil)
	if err != nil {
		return nil, err
	}
	mem, err := memstore.New(nil)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &Workload{sqlite: db, mem: mem}, nil
}

// Close closes the SQLite file.
func (w *Workload) Close() error { return w.sqlite.Close() }

// Run runs one round on both stores: a lease taken, refused to a second
// holder and released; an idempotent request executed and replayed; three
// requests against a limit of two per minute; a session created, loaded and
// revoked.
func (w *Workload) Run(ctx context.Context) error {
	w.round++
	stores := []struct {
		leases lease.Store
		idem   idempotency.Store
		limits ratelimit.Store
		sess   session.Store
	}{
		{w.mem.Leases(), w.mem.Idempotency(), w.mem.Limits(), w.mem.Sessions()},
		{w.sqlite.Leases(), w.sqlite.Idempotency(), w.sqlite.Limits(), w.sqlite.Sessions()},
	}
	for _, s := range stores {
		lk, err := lease.New(s.leases, nil)
		if err != nil {
			return err
		}
		l, err := lk.TryAcquire(ctx, "report", 10*time.Second)
		if err != nil {
			return err
		}
		if _, err := lk.TryAcquire(ctx, "report", 10*time.Second); !errors.Is(err, lease.ErrHeld) {
			return fmt.Errorf("second holder: %v", err)
		}
		if err := l.Release(ctx); err != nil {
			return err
		}

		k, err := idempotency.New(s.idem, nil)
		if err != nil {
			return err
		}
		req := idempotency.Request{Scope: "user:1 POST /payments", Key: fmt.Sprintf("pay-%d", w.round), Fingerprint: "amount=10"}
		pay := func(context.Context, *idempotency.Claim) ([]byte, error) { return []byte("paid"), nil }
		for range 2 {
			if _, err := k.Do(ctx, req, pay); err != nil {
				return err
			}
		}

		lim, err := ratelimit.New(s.limits, ratelimit.GCRA, ratelimit.Limit{Name: "api", Rate: 2, Period: time.Minute}, nil)
		if err != nil {
			return err
		}
		key := fmt.Sprintf("client-%d", w.round)
		for range 3 {
			if _, err := lim.Allow(ctx, key); err != nil {
				return err
			}
		}

		m, err := session.New(s.sess, nil)
		if err != nil {
			return err
		}
		tok, sess, err := m.Create(ctx, "user-1", nil)
		if err != nil {
			return err
		}
		if _, err := m.Load(ctx, tok); err != nil {
			return err
		}
		if err := m.Revoke(ctx, sess.ID()); err != nil {
			return err
		}
	}
	return nil
}
