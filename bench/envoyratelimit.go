package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlpb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// serve-redis-rate has a second network peer, envoyproxy/ratelimit
// (github.com/envoyproxy/ratelimit), Envoy's rate limit service, on the
// same Redis as tenure serve. It runs as its own process, as it is
// deployed: its service command is built once per run (go install of
// envoyRatelimitVersion, with the module's own requirements, into a
// temporary directory; the build cache makes later runs quick) and
// configured through its environment and one configuration file: one
// descriptor per key at benchRate a second, its fixed-window counters in
// Redis (INCRBY and EXPIRE pipelined), a Redis pool of MaxWorkers
// connections, its statistics off. The benchmark calls its gRPC API (ShouldRateLimit, one descriptor,
// one hit) on one client connection, as Envoy calls it.

// envoyRatelimitPkg is the package of envoyproxy/ratelimit's service
// command.
const envoyRatelimitPkg = "github.com/envoyproxy/ratelimit/src/service_cmd"

// envoyRatelimitVersion is the version measured: the module publishes no
// tagged release newer than v1.4.0 (2019), so this is its main branch of
// 22 January 2026.
const envoyRatelimitVersion = "v1.4.1-0.20260122083618-3fb702589d36"

// envoyRatelimitEnvs holds each Env's service (*Env -> *envoyRatelimit).
var envoyRatelimitEnvs sync.Map

type envoyRatelimit struct {
	once   sync.Once
	client rlpb.RateLimitServiceClient
	err    error
}

// envoyRatelimitDecide returns one decision through envoyproxy/ratelimit's
// gRPC API, on the Redis of the serve suites.
func (e *Env) envoyRatelimitDecide() (func(ctx context.Context, key string) error, error) {
	v, _ := envoyRatelimitEnvs.LoadOrStore(e, &envoyRatelimit{})
	p := v.(*envoyRatelimit)
	p.once.Do(func() { p.client, p.err = e.startEnvoyRatelimit() })
	if p.err != nil {
		return nil, p.err
	}
	return rlsDecider(p.client, "envoyproxy/ratelimit"), nil
}

// rlsDecider returns one decision through an Envoy rate limit service's
// gRPC API (ShouldRateLimit of domain bench, one descriptor key=key, one
// hit), which must allow it: the limit is far above what a run reaches.
func rlsDecider(c rlpb.RateLimitServiceClient, name string) func(ctx context.Context, key string) error {
	return func(ctx context.Context, key string) error {
		resp, err := c.ShouldRateLimit(ctx, &rlpb.RateLimitRequest{
			Domain:      "bench",
			Descriptors: []*rlsv3.RateLimitDescriptor{{Entries: []*rlsv3.RateLimitDescriptor_Entry{{Key: "key", Value: key}}}},
			HitsAddend:  1,
		})
		if err != nil {
			return err
		}
		if resp.OverallCode != rlpb.RateLimitResponse_OK {
			return fmt.Errorf("%s refused a decision far under the limit: %v", name, resp)
		}
		return nil
	}
}

// rlsConfig is the configuration of both Envoy rate limit services
// (envoyproxy/ratelimit's file, and tenure serve's rls section in the
// same shape): each value of descriptor key has its own limit of
// benchRate a second.
var rlsConfig = `domain: bench
descriptors:
  - key: key
    rate_limit:
      unit: second
      requests_per_unit: ` + strconv.Itoa(benchRate) + "\n"

func (e *Env) startEnvoyRatelimit() (rlpb.RateLimitServiceClient, error) {
	r, err := e.Redis()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "tenure-bench-envoy-ratelimit-")
	if err != nil {
		return nil, err
	}
	e.tb.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "service_cmd")
	build := exec.Command("go", "install", envoyRatelimitPkg+"@"+envoyRatelimitVersion)
	build.Env = append(os.Environ(), "GOBIN="+dir, "GOWORK=off", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build envoyproxy/ratelimit: %w\n%s", err, out)
	}
	conf := filepath.Join(dir, "runtime", "ratelimit", "config")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(conf, "bench.yaml"), []byte(rlsConfig), 0o644); err != nil {
		return nil, err
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	grpcAddr := "127.0.0.1:" + strconv.Itoa(ports[1])
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"HOST=127.0.0.1", "PORT="+strconv.Itoa(ports[0]),
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(ports[1]),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(ports[2]),
		"RUNTIME_ROOT="+filepath.Join(dir, "runtime"), "RUNTIME_SUBDIRECTORY=ratelimit",
		"RUNTIME_APPDIRECTORY=config", "RUNTIME_WATCH_ROOT=false",
		"BACKEND_TYPE=redis", "REDIS_SOCKET_TYPE=tcp", "REDIS_TYPE=SINGLE", "REDIS_URL="+r.addr,
		"REDIS_POOL_SIZE="+strconv.Itoa(MaxWorkers),
		"USE_STATSD=false", "DISABLE_STATS=true", "LOG_LEVEL=error",
	)
	logf, err := os.Create(filepath.Join(dir, "ratelimit.log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start envoyproxy/ratelimit: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); logf.Close() }()
	e.tb.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	e.tb.Cleanup(func() { conn.Close() })
	c := rlpb.NewRateLimitServiceClient(conn)
	// Ready when it answers a decision: it listens, and has loaded the
	// configuration.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	probe := &rlpb.RateLimitRequest{Domain: "bench", HitsAddend: 1,
		Descriptors: []*rlsv3.RateLimitDescriptor{{Entries: []*rlsv3.RateLimitDescriptor_Entry{{Key: "key", Value: "ready"}}}}}
	for {
		resp, err := c.ShouldRateLimit(ctx, probe)
		if err == nil && len(resp.Statuses) == 1 && resp.Statuses[0].CurrentLimit != nil {
			return c, nil
		}
		select {
		case err := <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "ratelimit.log"))
			return nil, fmt.Errorf("envoyproxy/ratelimit exited (%v):\n%s", err, log)
		case <-ctx.Done():
			log, _ := os.ReadFile(filepath.Join(dir, "ratelimit.log"))
			return nil, fmt.Errorf("envoyproxy/ratelimit not ready within a minute (last: %v, %v):\n%s", resp, err, log)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// freePorts returns n distinct free TCP ports on 127.0.0.1.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
