package sessiontest

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/tenurekit/tenure/session"
)

// Wrap puts a client-side fault hook in front of an in-process store
// (memstore, sqlitestore), which has no network path to break: after Cut,
// every call fails with session.ErrUnavailable without reaching the store.
func Wrap(s session.Store) (session.Store, Faults) {
	w := &wrapped{inner: s}
	return w, w
}

type wrapped struct {
	inner session.Store
	cut   atomic.Bool
}

func (w *wrapped) Cut()  { w.cut.Store(true) }
func (w *wrapped) Heal() { w.cut.Store(false) }

var errCut = errors.New("sessiontest: store cut off")

func (w *wrapped) check() error {
	if w.cut.Load() {
		return errors.Join(session.ErrUnavailable, errCut)
	}
	return nil
}

func (w *wrapped) Create(ctx context.Context, rec session.Record, idle, absolute time.Duration) (session.Record, error) {
	if err := w.check(); err != nil {
		return session.Record{}, err
	}
	return w.inner.Create(ctx, rec, idle, absolute)
}

func (w *wrapped) Load(ctx context.Context, id session.ID, idle time.Duration) (session.Record, error) {
	if err := w.check(); err != nil {
		return session.Record{}, err
	}
	return w.inner.Load(ctx, id, idle)
}

func (w *wrapped) Touch(ctx context.Context, id session.ID, version uint64, idle time.Duration) (time.Time, error) {
	if err := w.check(); err != nil {
		return time.Time{}, err
	}
	return w.inner.Touch(ctx, id, version, idle)
}

func (w *wrapped) Save(ctx context.Context, id session.ID, version uint64, data []byte, idle time.Duration) (session.Record, error) {
	if err := w.check(); err != nil {
		return session.Record{}, err
	}
	return w.inner.Save(ctx, id, version, data, idle)
}

func (w *wrapped) Rotate(ctx context.Context, old, newID session.ID, version uint64, data []byte, idle time.Duration) (session.Record, error) {
	if err := w.check(); err != nil {
		return session.Record{}, err
	}
	return w.inner.Rotate(ctx, old, newID, version, data, idle)
}

func (w *wrapped) Delete(ctx context.Context, id session.ID) error {
	if err := w.check(); err != nil {
		return err
	}
	return w.inner.Delete(ctx, id)
}

func (w *wrapped) DeleteUser(ctx context.Context, userID string) (int, error) {
	if err := w.check(); err != nil {
		return 0, err
	}
	return w.inner.DeleteUser(ctx, userID)
}

func (w *wrapped) List(ctx context.Context, userID string) ([]session.Record, error) {
	if err := w.check(); err != nil {
		return nil, err
	}
	return w.inner.List(ctx, userID)
}
