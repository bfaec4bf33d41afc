package rls_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/rueidis"

	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/server/rls"
	"github.com/tenurekit/tenure/store/redisstore"
)

// TestRedisTwoInstances runs two servers, each with its own Redis client,
// over one Redis (single node and Cluster) and checks that they share
// their counters; a request of several descriptors is one decision on the
// cluster (its state shares the domain's slot).
func TestRedisTwoInstances(t *testing.T) {
	for _, tc := range []struct {
		name  string
		addrs func(t *testing.T) []string
	}{
		{"single", func(t *testing.T) []string { return []string{testenv.SharedRedis(t).Addr()} }},
		{"cluster", func(t *testing.T) []string { return testenv.SharedRedisCluster(t).Addrs() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addrs := tc.addrs(t)
			prefix := fmt.Sprintf("rlstest:%d:", time.Now().UnixNano())
			var clients []rlsv3.RateLimitServiceClient
			for range 2 {
				c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableRetry: true})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(c.Close)
				srv, err := rls.NewServer(newRedis(t, c, &redisstore.Options{Prefix: prefix}).Limits(), mustConfig(t, testConfig), nil)
				if err != nil {
					t.Fatal(err)
				}
				clients = append(clients, rlsv3.NewRateLimitServiceClient(serveTCP(t, srv)))
			}
			req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{
				desc("tenant", "r"), desc("tenant", "r", "path", "/export/1"), desc("none", "x"),
			}}
			var got []string
			for i := range 4 {
				resp := call(t, clients[i%2], req)
				got = append(got, fmt.Sprintf("%v/%d/%d", resp.OverallCode, resp.Statuses[0].LimitRemaining, resp.Statuses[1].LimitRemaining))
			}
			// export (2 per hour) runs out first; the denied calls
			// consume nothing from tenant=r.
			if w := "OK/2/1 OK/1/0 OVER_LIMIT/1/0 OVER_LIMIT/1/0"; strings.Join(got, " ") != w {
				t.Errorf("alternating servers: %s, want %s", strings.Join(got, " "), w)
			}
		})
	}
}
