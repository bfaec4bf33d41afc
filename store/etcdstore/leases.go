package etcdstore

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/tenurekit/tenure/lease"
)

// leases is the lease.Store view of a Store.
type leases struct{ s *Store }

// attempts bounds the internal retries of one call (a transaction that
// overtook its lease grant, a holder's lease that ended meanwhile).
const attempts = 3

// grantResult is the outcome of a lease grant.
type grantResult struct {
	ttl int64 // seconds really granted
	err error
}

// pendingGrant is a lease grant in flight.
type pendingGrant struct {
	s        *Store
	id       int64
	ch       chan grantResult
	res      grantResult
	answered bool
}

// startGrant asks etcd for lease id of secs seconds in the background.
func (s *Store) startGrant(ctx context.Context, id, secs int64) *pendingGrant {
	g := &pendingGrant{s: s, id: id, ch: make(chan grantResult, 1)}
	go func() {
		_, ttl, err := s.rpc.grant(ctx, id, secs)
		g.ch <- grantResult{ttl: ttl, err: err}
	}()
	return g
}

// wait waits for the grant's answer, at most d if d > 0; it reports whether
// the answer is in.
func (g *pendingGrant) wait(d time.Duration) bool {
	if g.answered {
		return true
	}
	if d <= 0 {
		g.res, g.answered = <-g.ch, true
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case g.res = <-g.ch:
		g.answered = true
	case <-t.C:
	}
	return g.answered
}

// result waits for the grant's answer.
func (g *pendingGrant) result() grantResult {
	g.wait(0)
	return g.res
}

// discard revokes the lease once its grant has answered, in the background
// and best effort.
func (g *pendingGrant) discard() {
	if g.answered {
		if g.res.err == nil {
			g.s.revokeLater(g.id)
		}
		return
	}
	go func() {
		if r := <-g.ch; r.err == nil || unavailable(r.err) {
			g.s.revokeLater(g.id)
		}
	}()
}

// Acquire grants an etcd lease of ceil(ttl) seconds and runs one txn:
//
//	If(CreateRevision(lock) == 0)
//	Then(Put(lock, token, lease), Put(fence key, ""), Get(lock))
//	Else(Txn(If(Value(lock) == token)
//	         Then(Get(lock), Put(lock, token, lease))   // re-acquire: move onto the new lease
//	         Else(Get(lock))))                          // busy
//
// A Put on an existing key keeps its create revision, so a re-acquire keeps
// the fence and is renewed to the new lease's TTL; the old lease is revoked.
//
// The lease ID is chosen here, so the txn can be sent before the grant's
// reply arrives (after pipelineDelay): an acquire whose replies are lost
// still takes effect, and a retry with the same token reconciles it.
func (v leases) Acquire(ctx context.Context, key, token string, ttl time.Duration) (lease.Grant, error) {
	if err := lease.Validate(key, token, ttl); err != nil {
		return lease.Grant{}, err
	}
	s := v.s
	id := newLeaseID()
	pg := s.startGrant(ctx, id, ttlSeconds(ttl))
	if pg.wait(pipelineDelay) && pg.res.err != nil {
		return lease.Grant{}, wrapErr("grant lease", pg.res.err)
	}

	lock, fk := s.lockKey(key), s.fenceKey(key)
	for attempt := 1; ; attempt++ {
		resp, err := s.rpc.txn(ctx,
			cmps(cmpCreateRev(lock, cmpEqual, 0)),
			ops(opPut(lock, token, id), opPut(fk, "", 0), opGet(lock)),
			ops(opTxn(
				cmps(cmpValue(lock, cmpEqual, token)),
				ops(opGet(lock), opPut(lock, token, id)),
				ops(opGet(lock)),
			)),
		)
		if isEtcdErr(err, rpctypes.ErrGRPCLeaseNotFound) && attempt < attempts {
			// The txn overtook the grant, or the grant failed.
			if r := pg.result(); r.err != nil {
				return lease.Grant{}, wrapErr("grant lease", r.err)
			}
			continue
		}
		if err != nil {
			// The lock may be on the new lease now: a retry with the same
			// token reconciles, a release removes it, or it expires.
			return lease.Grant{}, wrapErr("acquire", err)
		}

		var fenceRev, oldLease int64
		if resp.Succeeded {
			kv := firstKV(resp.Responses[2])
			if kv == nil {
				return lease.Grant{}, fmt.Errorf("etcdstore: acquire %q: lock missing in its own txn", key)
			}
			fenceRev = kv.CreateRevision
		} else {
			inner := resp.Responses[0].GetResponseTxn()
			kv := firstKV(inner.GetResponses()[0])
			if kv == nil {
				return lease.Grant{}, fmt.Errorf("etcdstore: acquire %q: lock missing in its own txn", key)
			}
			if !inner.GetSucceeded() {
				// Busy.
				left, err := s.rpc.timeToLive(ctx, kv.Lease)
				if err != nil {
					pg.discard()
					return lease.Grant{}, wrapErr("acquire: holder's ttl", err)
				}
				if left < 0 && attempt < attempts {
					continue // the holder's lease ended meanwhile
				}
				pg.discard()
				return lease.Grant{}, &lease.HeldError{Key: key, TTL: ttlOf(max(left, 0))}
			}
			fenceRev, oldLease = kv.CreateRevision, kv.Lease
		}

		r := pg.result()
		if r.err != nil {
			if isEtcdErr(r.err, rpctypes.ErrGRPCLeaseExist) {
				// The random lease ID belonged to another lease already
				// (about one chance in 2^63 per live lease): the lock must
				// not live on a foreign lease.
				s.dropLock(lock, token, id)
				return lease.Grant{}, fmt.Errorf("etcdstore: acquire %q: lease ID collision, try again", key)
			}
			// The txn applied on a lease whose grant reply was lost.
			return lease.Grant{}, wrapErr("grant lease", r.err)
		}
		if oldLease != id {
			s.revokeLater(oldLease)
		}
		return lease.Grant{Fence: uint64(fenceRev), TTL: ttlOf(r.ttl)}, nil
	}
}

// dropLock deletes lock if token holds it on lease id, best effort.
func (s *Store) dropLock(lock, token string, id int64) {
	ctx, cancel := context.WithTimeout(s.c.Ctx(), s.revokeTimeout)
	defer cancel()
	s.rpc.txn(ctx, cmps(
		cmpValue(lock, cmpEqual, token),
		cmpLease(lock, cmpEqual, id),
	), ops(opDelete(lock)), nil)
}

// Renew checks that token holds key and refreshes the lock's etcd lease
// once (a keep-alive), which renews it to the TTL granted at acquisition. If
// ttl needs more seconds than that, the lock moves onto a new lease of
// ceil(ttl) seconds (keeping its fence). An expired lease is never brought
// back: etcd refuses to refresh it.
func (v leases) Renew(ctx context.Context, key, token string, ttl time.Duration) (lease.Grant, error) {
	if err := lease.Validate(key, token, ttl); err != nil {
		return lease.Grant{}, err
	}
	s := v.s
	lock := s.lockKey(key)
	for attempt := 1; ; attempt++ {
		kv, err := s.rpc.get(ctx, lock)
		if err != nil {
			return lease.Grant{}, wrapErr("renew", err)
		}
		if kv == nil || string(kv.Value) != token || kv.Lease == 0 {
			return lease.Grant{}, lease.ErrNotHeld
		}
		granted, err := s.rpc.keepAliveOnce(ctx, kv.Lease)
		if isEtcdErr(err, rpctypes.ErrGRPCLeaseNotFound) {
			if attempt < attempts {
				continue // expired, or moved onto another lease by the same token
			}
			return lease.Grant{}, lease.ErrNotHeld
		}
		if err != nil {
			return lease.Grant{}, wrapErr("renew", err)
		}
		if secs := ttlSeconds(ttl); granted < secs {
			return s.moveLock(ctx, lock, token, kv, secs)
		}
		return lease.Grant{Fence: uint64(kv.CreateRevision), TTL: ttlOf(granted)}, nil
	}
}

// moveLock puts the lock held by token (as read in kv) onto a new lease of
// secs seconds, keeping its create revision, and revokes the old lease.
func (s *Store) moveLock(ctx context.Context, lock, token string, kv *mvccpb.KeyValue, secs int64) (lease.Grant, error) {
	id, granted, err := s.rpc.grant(ctx, 0, secs)
	if err != nil {
		return lease.Grant{}, wrapErr("renew: grant lease", err)
	}
	resp, err := s.rpc.txn(ctx, cmps(
		cmpValue(lock, cmpEqual, token),
		cmpCreateRev(lock, cmpEqual, kv.CreateRevision),
	), ops(opPut(lock, token, id)), nil)
	if err != nil {
		return lease.Grant{}, wrapErr("renew", err)
	}
	if !resp.Succeeded {
		s.revokeLater(id)
		return lease.Grant{}, lease.ErrNotHeld
	}
	s.revokeLater(kv.Lease)
	return lease.Grant{Fence: uint64(kv.CreateRevision), TTL: ttlOf(granted)}, nil
}

// Release deletes the lock if its value is token, in one txn, and revokes
// its etcd lease in the background. The fence key stays, so Inspect still
// reports the last fence.
func (v leases) Release(ctx context.Context, key, token string) error {
	if err := lease.ValidateKey(key); err != nil {
		return err
	}
	if err := lease.ValidateToken(token); err != nil {
		return err
	}
	s := v.s
	lock := s.lockKey(key)
	resp, err := s.rpc.txn(ctx,
		cmps(cmpValue(lock, cmpEqual, token)),
		ops(opGet(lock), opDelete(lock)),
		nil,
	)
	if err != nil {
		return wrapErr("release", err)
	}
	if !resp.Succeeded {
		return lease.ErrNotHeld
	}
	if kv := firstKV(resp.Responses[0]); kv != nil {
		s.revokeLater(kv.Lease)
	}
	return nil
}

// Inspect reads the lock and fence keys in one txn and asks etcd for the
// lock's remaining TTL. The key is held while its lock key exists, that is
// until etcd revokes the expired lease.
func (v leases) Inspect(ctx context.Context, key string) (lease.Info, error) {
	if err := lease.ValidateKey(key); err != nil {
		return lease.Info{}, err
	}
	s := v.s
	resp, err := s.rpc.txn(ctx, nil, ops(opGet(s.lockKey(key)), opGet(s.fenceKey(key))), nil)
	if err != nil {
		return lease.Info{}, wrapErr("inspect", err)
	}
	info := lease.Info{Key: key}
	if kv := firstKV(resp.Responses[1]); kv != nil {
		info.Fence = uint64(kv.ModRevision)
	}
	kv := firstKV(resp.Responses[0])
	if kv == nil {
		return info, nil
	}
	info.Fence = uint64(kv.CreateRevision)
	left, err := s.rpc.timeToLive(ctx, kv.Lease)
	if err != nil {
		return lease.Info{}, wrapErr("inspect", err)
	}
	if left >= 0 {
		info.Held, info.TTL = true, ttlOf(left)
	}
	return info, nil
}
