package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/tenurekit/tenure"
	"github.com/tenurekit/tenure/cmd/tenure/internal/servestore"
	"github.com/tenurekit/tenure/cmd/tenure/internal/storeopen"
	"github.com/tenurekit/tenure/internal/storeurl"
	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/retention"
	"github.com/tenurekit/tenure/server"
	"github.com/tenurekit/tenure/server/rls"
	"github.com/tenurekit/tenure/store/memstore"
)

// serveFlags are tenure serve's flags.
type serveFlags struct {
	addr, store, dataDir, schema, prefix, config, tlsCert, tlsKey string
	rlsAddr, rlsConfig                                            string
	rlsTLSCert, rlsTLSKey, rlsClientCA, rlsTokenFile              string
	rlsInsecure                                                   bool
	drain, sweep                                                  time.Duration
	accessLog                                                     string
	// listening, when set, is called with the address once the server
	// listens (tests use it).
	listening func(addr string)
	// terminal, when set, replaces isTerminal (tests use it).
	terminal func(io.Writer) bool
}

// tokenFile is where the default configuration keeps its token.
const tokenFile = "serve-token"

func newServe() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve tenure's primitives over an HTTP API (JSON under /v1)",
		Long: `Serves leases, fenced values, idempotency records, rate limits, sessions and
slot history over a JSON API under /v1, described at /v1/openapi.json.
/healthz answers while the process is up (with "ok" and tenure's version,
as tenure version prints it on one line), /readyz while the store answers,
/metrics gives tenure's metrics in the Prometheus format.

Without --store it keeps its state in the embedded default, tenure.db in
--data-dir, created if missing. ` + "`--store`" + ` takes the same URLs as the other
commands; a PostgreSQL schema must exist (migrated) beforehand.

Without --config, one token allowed everything is made on first start,
stored in --data-dir/serve-token (mode 0600) and printed once. --config FILE
(JSON) sets the tokens, their namespaces and operations, the request limits
and timeouts; see docs/serve.md.

Every --sweep-interval it deletes what is past its retention: on SQLite,
PostgreSQL and memory the rows of ended leases, expired idempotency
records, sessions, rate limit state and old schedule records; on Redis, whose
other keys expire on their own, old schedule records; on etcd nothing is
left to delete.

SIGTERM or SIGINT drains: no new connections, waiting acquires answer at
once, requests in flight finish (up to --drain).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runServe(ctx, &f, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	p := cmd.Flags()
	p.StringVar(&f.addr, "addr", "127.0.0.1:7070", "address to listen on")
	p.StringVar(&f.store, "store", "", "store URL (default: the embedded SQLite file in --data-dir, created if missing)")
	p.StringVar(&f.dataDir, "data-dir", storeopen.DefaultDataDir(), "directory of the embedded default's tenure.db and the default token")
	p.StringVar(&f.schema, "schema", "tenure", "PostgreSQL schema of tenure's tables")
	p.StringVar(&f.prefix, "store-prefix", "", "the prefix of every key tenure keeps on Redis or etcd (default: the store's own, \"tenure:\" or \"tenure/\")")
	p.StringVar(&f.config, "config", "", "configuration file (JSON): tokens, limits, timeouts")
	p.StringVar(&f.tlsCert, "tls-cert", "", "TLS certificate file (PEM); with --tls-key, serve HTTPS")
	p.StringVar(&f.tlsKey, "tls-key", "", "TLS private key file (PEM)")
	p.StringVar(&f.rlsAddr, "rls-addr", "", "address of Envoy's rate limit service (gRPC); off when empty")
	p.StringVar(&f.rlsConfig, "rls-config", "", "rate limit service configuration (YAML as envoyproxy/ratelimit, or JSON); see docs/envoy.md")
	p.StringVar(&f.rlsTLSCert, "rls-tls-cert", "", "TLS certificate file (PEM) of the rate limit service; with --rls-tls-key")
	p.StringVar(&f.rlsTLSKey, "rls-tls-key", "", "TLS private key file (PEM) of the rate limit service")
	p.StringVar(&f.rlsClientCA, "rls-client-ca", "", "CA certificates (PEM) that sign the clients' certificates: mutual TLS, a client without one is refused")
	p.StringVar(&f.rlsTokenFile, "rls-token-file", "", "bearer tokens of the rate limit service, one per line: TOKEN [DOMAIN,...] (no domains: every domain)")
	p.BoolVar(&f.rlsInsecure, "rls-insecure", false, "let the rate limit service listen on a non-loopback address without client credentials (a token file or --rls-client-ca)")
	p.DurationVar(&f.drain, "drain", 30*time.Second, "how long requests in flight may take to finish on shutdown")
	p.StringVar(&f.accessLog, "access-log", "sampled", "which API requests get a log line: full (every one), sampled (one in 100) or off; requests that failed on the server's side are always logged")
	p.DurationVar(&f.sweep, "sweep-interval", time.Minute, "how often to delete what is past its retention (ended leases, expired records; on Redis, old schedule records); 0: never (run tenure sweep instead)")
	return cmd
}

// runServe runs the server until ctx ends, then drains it.
func runServe(ctx context.Context, f *serveFlags, stdout, stderr io.Writer) error {
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return exitErr{code: 2, err: errors.New("--tls-cert and --tls-key go together")}
	}
	if f.sweep < 0 {
		return exitErr{code: 2, err: fmt.Errorf("--sweep-interval must not be negative, got %v", f.sweep)}
	}
	accessLog, err := server.ParseAccessLog(cmp.Or(f.accessLog, "sampled"))
	if err != nil {
		return exitErr{code: 2, err: fmt.Errorf("--access-log: %w", err)}
	}
	spec, err := storeurl.Parse(f.store)
	if err != nil {
		return exitErr{code: 2, err: err}
	}
	var cfg *server.Config
	if f.config != "" {
		if cfg, err = server.LoadConfig(f.config); err != nil {
			return exitErr{code: 2, err: err}
		}
	}

	metrics, shutdownMetrics, err := installMetrics()
	if err != nil {
		return err
	}
	defer shutdownMetrics(context.Background())

	openCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := storeopen.Open(openCtx, spec, &storeopen.Options{DataDir: f.dataDir, Schema: f.schema, Prefix: f.prefix, CreateEmbedded: true})
	if err != nil {
		return exitErr{code: 2, err: err}
	}
	defer st.Close()
	if sw := st.Sweeper(); sw != nil && f.sweep > 0 {
		stopSweep, err := retention.Start(ctx, sw, f.sweep, retention.Options{}, log)
		if err != nil {
			return exitErr{code: 2, err: err}
		}
		defer stopSweep()
	}
	views, release, err := servestore.Stores(openCtx, st)
	if err != nil {
		return exitErr{code: 2, err: err}
	}
	defer release()
	// The admin token is made only once the store is known to work, so a
	// start that fails mints nothing.
	if cfg == nil {
		path := filepath.Join(f.dataDir, tokenFile)
		tok, created, err := server.LoadOrCreateToken(path)
		if err != nil {
			return exitErr{code: 2, err: err}
		}
		switch {
		case !created:
			fmt.Fprintf(stdout, "API token: the one kept in %s\n", path)
		case f.isTerminal(stdout):
			fmt.Fprintf(stdout, "API token (shown once; kept in %s):\n  %s\n", path, tok.Reveal())
		default:
			// A service's log (systemd, Kubernetes) keeps what it is
			// given: the token stays in its file.
			fmt.Fprintf(stdout, "API token: a new one, kept in %s (mode 0600; not printed, as this is not a terminal)\n", path)
		}
		cfg = server.AdminConfig(tok)
	}
	if f.rlsAddr != "" {
		stopRLS, err := startRLS(ctx, f, views.Limits, log)
		if err != nil {
			return err
		}
		defer stopRLS()
	}
	// The API's own per-token limit is kept in this process: it costs no
	// store round trip.
	apiLimits, err := memstore.New(nil)
	if err != nil {
		return exitErr{code: 2, err: err}
	}
	srv, err := server.New(views, &server.Options{
		Config: cfg, Logger: log, Metrics: metrics,
		// The dashboard's login cookie is Secure only over HTTPS: a
		// browser drops a Secure cookie set over plain HTTP.
		HTTPS:     f.tlsCert != "",
		APILimits: apiLimits.Limits(),
		Version:   currentVersion().Short(),
		AccessLog: accessLog,
	})
	if err != nil {
		return exitErr{code: 2, err: err}
	}
	hs := srv.HTTPServer(f.addr)
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		return exitErr{code: 2, err: err}
	}
	scheme := "http"
	if f.tlsCert != "" {
		scheme = "https"
	}
	base := scheme + "://" + ln.Addr().String()
	if scheme == "http" && !loopback(ln.Addr()) {
		log.Warn("serving plain HTTP on an address other hosts can reach: bearer tokens and session cookies cross the network in clear; use --tls-cert and --tls-key, or a TLS proxy in front", "addr", ln.Addr().String())
	}
	log.Info("serving", "store", st.Target, "api", base+"/v1", "openapi", base+"/v1/openapi.json", "dashboard", base+"/")
	if f.listening != nil {
		f.listening(ln.Addr().String())
	}
	errc := make(chan error, 1)
	go func() {
		if f.tlsCert != "" {
			errc <- hs.ServeTLS(ln, f.tlsCert, f.tlsKey)
		} else {
			errc <- hs.Serve(ln)
		}
	}()
	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	case <-ctx.Done():
	}
	log.Info("draining")
	srv.Drain()
	dctx, dcancel := context.WithTimeout(context.Background(), f.drain)
	defer dcancel()
	if err := hs.Shutdown(dctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped")
	return nil
}

// installMetrics makes an OpenTelemetry SDK MeterProvider read by the
// Prometheus exporter, installs it globally (tenure's components record on
// the global provider), and returns the /metrics handler. The name
// translation is set explicitly so the exposed names do not move.
func installMetrics() (http.Handler, func(context.Context) error, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(
		otelprom.WithRegisterer(reg),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
	)
	if err != nil {
		return nil, nil, err
	}
	// service.name is "tenure" unless OTEL_SERVICE_NAME or
	// OTEL_RESOURCE_ATTRIBUTES says otherwise; Prometheus shows it on
	// target_info.
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", "tenure"),
		attribute.String("service.version", currentVersion().Version)))
	if err != nil {
		return nil, nil, err
	}
	if env, err := resource.New(context.Background(), resource.WithFromEnv()); err == nil {
		if merged, err := resource.Merge(res, env); err == nil {
			res = merged
		}
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(res))
	otel.SetMeterProvider(mp)
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), mp.Shutdown, nil
}

// startRLS serves Envoy's rate limit service on its own gRPC listener until
// ctx ends; the returned function waits for it to stop.
func startRLS(ctx context.Context, f *serveFlags, limits ratelimit.Store, log *slog.Logger) (func(), error) {
	if f.rlsConfig == "" {
		return nil, exitErr{code: 2, err: errors.New("--rls-addr needs --rls-config: the domains and descriptors to limit")}
	}
	cfg, err := rls.LoadFile(f.rlsConfig)
	if err != nil {
		return nil, exitErr{code: 2, err: err}
	}
	if limits == nil {
		return nil, exitErr{code: 2, err: errors.New("--rls-addr: the store keeps no rate limits")}
	}
	creds, err := loadRLSTokens(f.rlsTokenFile)
	if err != nil {
		return nil, exitErr{code: 2, err: err}
	}
	var opts []grpc.ServerOption
	switch {
	case (f.rlsTLSCert == "") != (f.rlsTLSKey == ""):
		return nil, exitErr{code: 2, err: errors.New("--rls-tls-cert and --rls-tls-key go together")}
	case f.rlsClientCA != "" && f.rlsTLSCert == "":
		return nil, exitErr{code: 2, err: errors.New("--rls-client-ca needs --rls-tls-cert and --rls-tls-key")}
	case f.rlsTLSCert != "":
		tc, err := rlsTLS(f)
		if err != nil {
			return nil, exitErr{code: 2, err: err}
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(tc)))
	}
	srv, err := rls.NewServer(limits, cfg, &rls.Options{Logger: log, Credentials: creds})
	if err != nil {
		return nil, exitErr{code: 2, err: err}
	}
	ln, err := net.Listen("tcp", f.rlsAddr)
	if err != nil {
		return nil, exitErr{code: 2, err: err}
	}
	if !loopback(ln.Addr()) && len(creds) == 0 && f.rlsClientCA == "" && !f.rlsInsecure {
		ln.Close()
		return nil, exitErr{code: 2, err: fmt.Errorf("--rls-addr %s is reachable from other hosts and the rate limit service asks no credentials: anyone could use up every tenant's limits; give --rls-token-file or --rls-client-ca (with --rls-tls-cert and --rls-tls-key), or --rls-insecure to serve it open", ln.Addr())}
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(rctx, ln, opts...) }()
	log.Info("serving Envoy's rate limit service", "addr", ln.Addr().String(), "tls", f.rlsTLSCert != "", "mtls", f.rlsClientCA != "", "tokens", len(creds))
	return func() { stop(); <-done }, nil
}

// loadRLSTokens reads --rls-token-file: one token per line, optionally
// followed by the comma-separated domains it may use; blank lines and
// lines starting with # are skipped. Errors never show a token.
func loadRLSTokens(path string) ([]rls.Credential, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--rls-token-file: %w", err)
	}
	var out []rls.Credential
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) > 2 {
			return nil, fmt.Errorf("--rls-token-file %s line %d: want TOKEN [DOMAIN,...]", path, i+1)
		}
		c := rls.Credential{Token: tenure.TokenOf(fields[0])}
		if len(fields) == 2 {
			for d := range strings.SplitSeq(fields[1], ",") {
				if d == "" {
					return nil, fmt.Errorf("--rls-token-file %s line %d: an empty domain", path, i+1)
				}
				c.Domains = append(c.Domains, d)
			}
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--rls-token-file %s has no token", path)
	}
	return out, nil
}

// rlsTLS is the rate limit service's TLS configuration: its certificate,
// and with --rls-client-ca the CAs a client's certificate must chain to.
func rlsTLS(f *serveFlags) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(f.rlsTLSCert, f.rlsTLSKey)
	if err != nil {
		return nil, fmt.Errorf("--rls-tls-cert/--rls-tls-key: %w", err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if f.rlsClientCA != "" {
		pem, err := os.ReadFile(f.rlsClientCA)
		if err != nil {
			return nil, fmt.Errorf("--rls-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--rls-client-ca %s: no PEM certificate in it", f.rlsClientCA)
		}
		tc.ClientCAs, tc.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

func (f *serveFlags) isTerminal(w io.Writer) bool {
	if f.terminal != nil {
		return f.terminal(w)
	}
	return isTerminal(w)
}

// isTerminal reports whether w is a terminal (a character device), where a
// secret shown once is seen by a person and not kept in a log.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// loopback reports whether a is a loopback address.
func loopback(a net.Addr) bool {
	t, ok := a.(*net.TCPAddr)
	return ok && t.IP.IsLoopback()
}
