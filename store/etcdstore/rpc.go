package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"net"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tenurekit/tenure/lease"
)

// The store talks to etcd with the plain gRPC clients on the client's
// connection (so its balancer, credentials and interceptors apply) because
// it needs two things clientv3's helpers do not offer: a lease grant with an
// ID chosen here, and fail-fast calls. clientv3 makes every call wait for a
// broken connection to come back until the context ends; the store's calls
// fail at once with lease.ErrUnavailable while the connection is in
// transient failure, so a holder learns in time that it cannot renew.
var failFast = grpc.WaitForReady(false)

// rpc holds the plain gRPC clients.
type rpc struct {
	kv pb.KVClient
	lc pb.LeaseClient
}

func newRPC(c *clientv3.Client) rpc {
	conn := c.ActiveConnection()
	return rpc{kv: pb.NewKVClient(conn), lc: pb.NewLeaseClient(conn)}
}

func (r rpc) txn(ctx context.Context, cmps []*pb.Compare, then, els []*pb.RequestOp) (*pb.TxnResponse, error) {
	return r.kv.Txn(ctx, txnRequest(cmps, then, els), failFast)
}

func (r rpc) get(ctx context.Context, key string) (*mvccpb.KeyValue, error) {
	resp, err := r.kv.Range(ctx, &pb.RangeRequest{Key: []byte(key)}, failFast)
	if err != nil {
		return nil, err
	}
	return first(resp.Kvs), nil
}

// grant asks for lease id (0: etcd chooses) of secs seconds and returns the
// ID and the TTL etcd granted.
func (r rpc) grant(ctx context.Context, id, secs int64) (int64, int64, error) {
	resp, err := r.lc.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: id, TTL: secs}, failFast)
	if err != nil {
		return 0, 0, err
	}
	if resp.Error != "" {
		return 0, 0, errors.New(resp.Error)
	}
	return resp.ID, resp.TTL, nil
}

func (r rpc) revoke(ctx context.Context, id int64) error {
	_, err := r.lc.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: id}, failFast)
	return err
}

// timeToLive returns the remaining whole seconds of lease id, -1 if etcd no
// longer has it.
func (r rpc) timeToLive(ctx context.Context, id int64) (int64, error) {
	if id == 0 {
		return -1, nil
	}
	resp, err := r.lc.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: id}, failFast)
	if isEtcdErr(err, rpctypes.ErrGRPCLeaseNotFound) {
		return -1, nil
	}
	if err != nil {
		return 0, err
	}
	return resp.TTL, nil
}

// keepAliveOnce refreshes lease id once and returns the TTL it was renewed
// to, or an error that is rpctypes.ErrGRPCLeaseNotFound if the lease is
// gone.
func (r rpc) keepAliveOnce(ctx context.Context, id int64) (int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream
	stream, err := r.lc.LeaseKeepAlive(ctx, failFast)
	if err != nil {
		return 0, err
	}
	if err := stream.Send(&pb.LeaseKeepAliveRequest{ID: id}); err != nil {
		return 0, err
	}
	resp, err := stream.Recv()
	if err != nil {
		return 0, err
	}
	if resp.TTL <= 0 {
		return 0, rpctypes.ErrGRPCLeaseNotFound
	}
	return resp.TTL, nil
}

func txnRequest(cmps []*pb.Compare, then, els []*pb.RequestOp) *pb.TxnRequest {
	return &pb.TxnRequest{Compare: cmps, Success: then, Failure: els}
}

// The compares are built as the wire messages they are, with etcd's public
// API types only, so the store builds with every client release (the
// layout of clientv3.Cmp is the client's own business and changes).

// The results the store compares with.
const (
	cmpEqual = pb.Compare_EQUAL
	cmpLess  = pb.Compare_LESS
)

// cmpCreateRev compares key's create revision (0: the key does not exist).
func cmpCreateRev(key string, r pb.Compare_CompareResult, rev int64) *pb.Compare {
	return &pb.Compare{Key: []byte(key), Result: r, Target: pb.Compare_CREATE,
		TargetUnion: &pb.Compare_CreateRevision{CreateRevision: rev}}
}

// cmpValue compares key's value bytewise (false if key does not exist).
func cmpValue(key string, r pb.Compare_CompareResult, v string) *pb.Compare {
	return &pb.Compare{Key: []byte(key), Result: r, Target: pb.Compare_VALUE,
		TargetUnion: &pb.Compare_Value{Value: []byte(v)}}
}

// cmpLease compares the lease key is attached to.
func cmpLease(key string, r pb.Compare_CompareResult, id int64) *pb.Compare {
	return &pb.Compare{Key: []byte(key), Result: r, Target: pb.Compare_LEASE,
		TargetUnion: &pb.Compare_Lease{Lease: id}}
}

func opPut(key, value string, leaseID int64) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{
		Key: []byte(key), Value: []byte(value), Lease: leaseID,
	}}}
}

func opGet(key string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(key)}}}
}

func opDelete(key string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(key)}}}
}

func opTxn(cmps []*pb.Compare, then, els []*pb.RequestOp) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: txnRequest(cmps, then, els)}}
}

func ops(o ...*pb.RequestOp) []*pb.RequestOp { return o }
func cmps(c ...*pb.Compare) []*pb.Compare    { return c }

// firstKV returns the first key of a range response op, nil if none.
func firstKV(r *pb.ResponseOp) *mvccpb.KeyValue { return first(r.GetResponseRange().GetKvs()) }

func first(kvs []*mvccpb.KeyValue) *mvccpb.KeyValue {
	if len(kvs) == 0 {
		return nil
	}
	return kvs[0]
}

// wrapErr turns a client error into the store's error: transport failures,
// replies that mean "try again" and context errors wrap
// lease.ErrUnavailable; anything else is a plain error.
func wrapErr(op string, err error) error {
	if unavailable(err) {
		return fmt.Errorf("etcdstore: %s: %w: %w", op, lease.ErrUnavailable, err)
	}
	return fmt.Errorf("etcdstore: %s: %w", op, rpctypes.Error(err))
}

func unavailable(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, clientv3.ErrNoAvailableEndpoints) {
		return true
	}
	code := codes.OK
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		code = ee.Code()
	} else if st, ok := status.FromError(err); ok {
		code = st.Code()
	}
	switch code {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return true
	}
	var ne net.Error
	return errors.As(err, &ne)
}

// isEtcdErr reports whether err is etcd's error target, in any of the forms
// gRPC and the client hand out (status error or rpctypes.EtcdError).
func isEtcdErr(err, target error) bool {
	return err != nil && rpctypes.ErrorDesc(err) == rpctypes.ErrorDesc(target)
}
