package leasetest

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/tenurekit/tenure/lease"
)

// Wrap puts a client-side fault hook in front of an in-process store
// (memstore, sqlitestore), which has no network path to break. Cut makes
// every call fail with lease.ErrUnavailable without reaching the store;
// DropReplies lets every call apply and then loses its reply: the caller
// waits until its context ends, as it would for a reply lost on the wire.
func Wrap(s lease.Store) (lease.Store, Faults) {
	w := &wrapped{inner: s}
	return w, w
}

const (
	healthy int32 = iota
	cut
	dropping
)

type wrapped struct {
	inner lease.Store
	mode  atomic.Int32
}

func (w *wrapped) Cut()         { w.mode.Store(cut) }
func (w *wrapped) DropReplies() { w.mode.Store(dropping) }
func (w *wrapped) Heal()        { w.mode.Store(healthy) }

var errUnreachable = errors.New("leasetest: store cut off")

// call runs op under the current fault mode.
func (w *wrapped) call(ctx context.Context, op func(ctx context.Context) error) error {
	switch w.mode.Load() {
	case cut:
		return errors.Join(lease.ErrUnavailable, errUnreachable)
	case dropping:
		_ = op(context.WithoutCancel(ctx))
		<-ctx.Done()
		return errors.Join(lease.ErrUnavailable, ctx.Err())
	}
	return op(ctx)
}

func (w *wrapped) Acquire(ctx context.Context, key, token string, ttl time.Duration) (g lease.Grant, err error) {
	err = w.call(ctx, func(ctx context.Context) (err error) {
		g, err = w.inner.Acquire(ctx, key, token, ttl)
		return err
	})
	if err != nil {
		return lease.Grant{}, err
	}
	return g, nil
}

func (w *wrapped) Renew(ctx context.Context, key, token string, ttl time.Duration) (g lease.Grant, err error) {
	err = w.call(ctx, func(ctx context.Context) (err error) {
		g, err = w.inner.Renew(ctx, key, token, ttl)
		return err
	})
	if err != nil {
		return lease.Grant{}, err
	}
	return g, nil
}

func (w *wrapped) Release(ctx context.Context, key, token string) error {
	return w.call(ctx, func(ctx context.Context) error { return w.inner.Release(ctx, key, token) })
}

func (w *wrapped) Inspect(ctx context.Context, key string) (info lease.Info, err error) {
	err = w.call(ctx, func(ctx context.Context) (err error) {
		info, err = w.inner.Inspect(ctx, key)
		return err
	})
	if err != nil {
		return lease.Info{}, err
	}
	return info, nil
}
