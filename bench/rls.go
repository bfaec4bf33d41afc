package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tenurekit/tenure"
	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/server/rls"
)

// The serve rate suites' contender tenure-rls is tenure serve's other
// API: its Envoy rate limit service (package server/rls, as tenure serve
// builds it: a bearer token asked of every call, a text logger), deciding
// on the suite's store under the same configuration file as
// envoyproxy/ratelimit, called through gRPC as Envoy calls it, on one
// client connection, with the same request (see rlsDecider). Against
// envoy-ratelimit it compares two Envoy rate limit services on one Redis;
// against gubernator, two gRPC APIs.

// startRLS serves tenure's rate limit service on limits, on a listener on
// 127.0.0.1, and returns one decision through it.
func (e *Env) startRLS(limits ratelimit.Store) (func(ctx context.Context, key string) error, error) {
	cfg, err := rls.ParseYAML([]byte(rlsConfig))
	if err != nil {
		return nil, err
	}
	srv, err := rls.NewServer(limits, cfg, &rls.Options{
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		Credentials: []rls.Credential{{Token: tenure.TokenOf(serveToken)}},
	})
	if err != nil {
		return nil, fmt.Errorf("rls.NewServer: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	e.tb.Cleanup(func() { stop(); <-done })
	conn, err := grpc.NewClient(ln.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(bearer(serveToken)))
	if err != nil {
		return nil, err
	}
	e.tb.Cleanup(func() { conn.Close() })
	decide := rlsDecider(rlpb.NewRateLimitServiceClient(conn), "tenure serve's rate limit service")
	if err := decide(context.Background(), "warm"); err != nil {
		return nil, err
	}
	return decide, nil
}

// bearer sends a bearer token in every call's metadata, as Envoy's
// grpc_service initial_metadata does (over loopback without TLS).
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }
