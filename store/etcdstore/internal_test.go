package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tenurekit/tenure/internal/testenv"
)

func TestTTLSeconds(t *testing.T) {
	for ttl, want := range map[time.Duration]int64{
		time.Millisecond:        1,
		100 * time.Millisecond:  1,
		time.Second:             1,
		time.Second + 1:         2,
		1500 * time.Millisecond: 2,
		24 * time.Hour:          86400,
	} {
		if got := ttlSeconds(ttl); got != want {
			t.Errorf("ttlSeconds(%v) = %d, want %d", ttl, got, want)
		}
	}
}

// The admitted fence is compared bytewise by etcd: the encoding must order
// like the numbers.
func TestFenceEncodingOrders(t *testing.T) {
	edge := []uint64{0, 1, 9, 10, 99, 100, math.MaxUint32, 1 << 63, math.MaxUint64 - 1, math.MaxUint64}
	for i := 0; i < 2000; i++ {
		edge = append(edge, rand.Uint64N(1<<uint(rand.IntN(64)+1)-1))
	}
	for _, a := range edge {
		for _, b := range edge[:20] {
			ea, eb := encodeFence(a), encodeFence(b)
			if (a < b) != (ea < eb) || (a == b) != (ea == eb) {
				t.Fatalf("%d vs %d encode as %q vs %q", a, b, ea, eb)
			}
		}
		if got, err := decodeFence([]byte(encodeFence(a))); err != nil || got != a {
			t.Fatalf("round trip of %d: %d, %v", a, got, err)
		}
	}
}

func TestErrorClasses(t *testing.T) {
	for _, err := range []error{
		context.Canceled,
		context.DeadlineExceeded,
		fmt.Errorf("wrapped: %w", context.DeadlineExceeded),
		status.Error(codes.Unavailable, "connection refused"),
		status.Error(codes.DeadlineExceeded, "deadline"),
		rpctypes.ErrGRPCNoLeader,
		rpctypes.ErrGRPCTimeout,
		rpctypes.ErrLeaderChanged, // the client's EtcdError form
		clientv3.ErrNoAvailableEndpoints,
	} {
		if !unavailable(err) {
			t.Errorf("%v: not classed as unavailable", err)
		}
	}
	for _, err := range []error{
		rpctypes.ErrGRPCLeaseNotFound,
		rpctypes.ErrGRPCRequestTooLarge,
		rpctypes.ErrGRPCRequestTooManyRequests,
		errors.New("etcdserver: something else"),
	} {
		if unavailable(err) {
			t.Errorf("%v: classed as unavailable", err)
		}
	}
}

// TestServerReplies checks the etcd replies that Acquire and Renew rely on,
// against a real server: a txn that names a lease not granted yet is refused
// as a whole (so a txn that overtakes its grant changes nothing and is sent
// again), a lease ID can be granted once, and a gone lease is reported as
// such by keep-alive and time-to-live.
func TestServerReplies(t *testing.T) {
	srv := testenv.SharedEtcd(t)
	c, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := newRPC(c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := fmt.Sprintf("test/%s/%d", t.Name(), time.Now().UnixNano())
	id := newLeaseID()

	_, err = r.txn(ctx, nil, ops(opPut(key+"/a", "v", 0), opPut(key+"/b", "v", id)), nil)
	if !isEtcdErr(err, rpctypes.ErrGRPCLeaseNotFound) || unavailable(err) {
		t.Fatalf("txn on a lease not granted: %v, want lease not found", err)
	}
	if kv, err := r.get(ctx, key+"/a"); err != nil || kv != nil {
		t.Fatalf("the refused txn wrote part of itself: %v, %v", kv, err)
	}
	if ttl, err := r.timeToLive(ctx, id); err != nil || ttl != -1 {
		t.Fatalf("time to live of a lease not granted: %d, %v", ttl, err)
	}
	if _, err := r.keepAliveOnce(ctx, id); !isEtcdErr(err, rpctypes.ErrGRPCLeaseNotFound) {
		t.Fatalf("keep-alive of a lease not granted: %v", err)
	}

	gotID, ttl, err := r.grant(ctx, id, 30)
	if err != nil || gotID != id || ttl != 30 {
		t.Fatalf("grant: id %x ttl %d (%v), want id %x ttl 30", gotID, ttl, err, id)
	}
	if _, _, err := r.grant(ctx, id, 30); !isEtcdErr(err, rpctypes.ErrGRPCLeaseExist) {
		t.Fatalf("second grant of the same ID: %v, want lease exists", err)
	}
	if _, err := r.txn(ctx, nil, ops(opPut(key+"/b", "v", id)), nil); err != nil {
		t.Fatalf("txn after the grant: %v", err)
	}
	if got, err := r.keepAliveOnce(ctx, id); err != nil || got != 30 {
		t.Fatalf("keep-alive: %d, %v", got, err)
	}
	if err := r.revoke(ctx, id); err != nil {
		t.Fatal(err)
	}
	if kv, err := r.get(ctx, key+"/b"); err != nil || kv != nil {
		t.Fatalf("revoke left the key: %v, %v", kv, err)
	}
}
