package idempotencytest

import (
	"context"
	"errors"
	"github.com/tenurekit/tenure/idempotency/driver"
	"sync/atomic"
	"time"

	"github.com/tenurekit/tenure/idempotency"
)

// Wrap puts a client-side fault hook in front of an in-process store
// (memstore, sqlitestore), which has no network path to break. Cut makes
// every call fail with idempotency.ErrUnavailable without reaching the
// store; DropReplies lets every call apply and then loses its reply: the
// caller waits until its context ends, as it would for a reply lost on the
// wire.
func Wrap(s idempotency.Store) (idempotency.Store, Faults) {
	w := &wrapped{inner: s}
	return w, w
}

const (
	healthy int32 = iota
	cut
	dropping
)

type wrapped struct {
	inner idempotency.Store
	mode  atomic.Int32
}

func (w *wrapped) Cut()         { w.mode.Store(cut) }
func (w *wrapped) DropReplies() { w.mode.Store(dropping) }
func (w *wrapped) Heal()        { w.mode.Store(healthy) }

var errUnreachable = errors.New("idempotencytest: store cut off")

func (w *wrapped) call(ctx context.Context, op func(ctx context.Context) error) error {
	switch w.mode.Load() {
	case cut:
		return errors.Join(idempotency.ErrUnavailable, errUnreachable)
	case dropping:
		_ = op(context.WithoutCancel(ctx))
		<-ctx.Done()
		return errors.Join(idempotency.ErrUnavailable, ctx.Err())
	}
	return op(ctx)
}

func (w *wrapped) Begin(ctx context.Context, b driver.Begin) (r driver.Begun, err error) {
	err = w.call(ctx, func(ctx context.Context) (err error) {
		r, err = w.inner.Begin(ctx, b)
		return err
	})
	if err != nil {
		return driver.Begun{}, err
	}
	return r, nil
}

func (w *wrapped) Renew(ctx context.Context, id idempotency.ID, token string, fence uint64, ttl time.Duration) error {
	return w.call(ctx, func(ctx context.Context) error { return w.inner.Renew(ctx, id, token, fence, ttl) })
}

func (w *wrapped) Complete(ctx context.Context, id idempotency.ID, token string, fence uint64, out idempotency.Outcome, retention time.Duration) error {
	return w.call(ctx, func(ctx context.Context) error {
		return w.inner.Complete(ctx, id, token, fence, out, retention)
	})
}

func (w *wrapped) Release(ctx context.Context, id idempotency.ID, token string) error {
	return w.call(ctx, func(ctx context.Context) error { return w.inner.Release(ctx, id, token) })
}

func (w *wrapped) Inspect(ctx context.Context, id idempotency.ID) (r idempotency.Record, err error) {
	err = w.call(ctx, func(ctx context.Context) (err error) {
		r, err = w.inner.Inspect(ctx, id)
		return err
	})
	if err != nil {
		return idempotency.Record{}, err
	}
	return r, nil
}
