// Package servestore gives tenure serve the views of an opened store,
// together with the fenced values it keeps for resources that have no guard
// of their own: on memory and Redis the store's FencedSet and FencedGet, on
// etcd its FencedPut and FencedGet, on SQLite and PostgreSQL a value table
// written in one transaction with the store's Admit. It also gives the
// values of users checked against a session: on SQLite and PostgreSQL a
// table written in one transaction with the store's CheckSession, on
// memory a map written under the store's WithSession.
package servestore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/tenurekit/tenure/cmd/tenure/internal/storeopen"
	"github.com/tenurekit/tenure/internal/fencedkv"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/server"
	"github.com/tenurekit/tenure/session"
	"github.com/tenurekit/tenure/store/etcdstore"
	"github.com/tenurekit/tenure/store/redisstore"
)

// ValueTable is the name of the fenced value table on SQL stores (with the
// store's schema on PostgreSQL).
const ValueTable = "tenure_serve_values"

// SessionValueTable is the name of the table of values checked against a
// session on SQL stores (with the store's schema on PostgreSQL).
const SessionValueTable = "tenure_session_values"

// Stores returns the views of st and its fenced values, and a function
// that releases what it opened.
func Stores(ctx context.Context, st *storeopen.Stores) (server.Stores, func(), error) {
	out := server.Stores{Leases: st.Leases, Idempotency: st.Idempotency, Limits: st.Limits, Sessions: st.Sessions, Schedules: st.Schedules}
	done := func() {}
	switch {
	case st.Mem != nil:
		out.Fenced = memKV{st.Mem}
		out.SessionValues = fencedkv.NewMemSessionKV(st.Mem)
	case st.Redis != nil:
		out.Fenced = memKV{st.Redis}
		out.SessionValues = RedisSessionValues(st.Redis)
	case st.Etcd != nil:
		// etcd keeps no sessions: no values checked against one.
		out.Fenced = etcdKV{st.Etcd}
	case st.SQLite != nil:
		kv, err := fencedkv.New(ctx, st.SQLite.DB(), fencedkv.SQLite, `"`+ValueTable+`"`, st.SQLite)
		if err != nil {
			return server.Stores{}, nil, err
		}
		sv, err := fencedkv.NewSessionKV(ctx, st.SQLite.DB(), fencedkv.SQLite, `"`+SessionValueTable+`"`, st.SQLite)
		if err != nil {
			return server.Stores{}, nil, err
		}
		out.Fenced, out.SessionValues = kv, sv
	case st.PG != nil:
		db := stdlib.OpenDBFromPool(st.PGPool)
		kv, err := fencedkv.New(ctx, db, fencedkv.Postgres, `"`+st.PG.Schema()+`"."`+ValueTable+`"`, st.PG)
		if err != nil {
			db.Close()
			return server.Stores{}, nil, err
		}
		sv, err := fencedkv.NewSessionKV(ctx, db, fencedkv.Postgres, `"`+st.PG.Schema()+`"."`+SessionValueTable+`"`, st.PG)
		if err != nil {
			db.Close()
			return server.Stores{}, nil, err
		}
		out.Fenced, out.SessionValues = kv, sv
		done = func() { db.Close() }
	default:
		return server.Stores{}, nil, fmt.Errorf("servestore: no store opened")
	}
	return out, done, nil
}

// FencedStore is what memstore and redisstore keep fenced values with.
type FencedStore interface {
	FencedSet(ctx context.Context, resource string, f uint64, value []byte) error
	FencedGet(ctx context.Context, resource string) ([]byte, uint64, error)
	HolderSet(ctx context.Context, l *lease.Lease, resource string, value []byte) error
}

// FencedValues is the FencedKV of a memory or Redis store: its FencedSet,
// HolderSet and FencedGet.
func FencedValues(s FencedStore) server.FencedKV { return memKV{s} }

// memKV adapts a FencedStore.
type memKV struct{ s FencedStore }

func (m memKV) HolderWrite(ctx context.Context, l *lease.Lease, name string, value []byte) error {
	return m.s.HolderSet(ctx, l, name, value)
}

func (m memKV) FencedWrite(ctx context.Context, name string, f uint64, value []byte) error {
	return m.s.FencedSet(ctx, name, f, value)
}

func (m memKV) FencedRead(ctx context.Context, name string) ([]byte, uint64, error) {
	return m.s.FencedGet(ctx, name)
}

// etcdKV adapts etcdstore's fenced values.
type etcdKV struct{ s *etcdstore.Store }

func (e etcdKV) FencedWrite(ctx context.Context, name string, f uint64, value []byte) error {
	return e.s.FencedPut(ctx, name, string(value), f)
}

func (e etcdKV) HolderWrite(ctx context.Context, l *lease.Lease, name string, value []byte) error {
	return e.s.HolderPut(ctx, l, name, string(value))
}

func (e etcdKV) FencedRead(ctx context.Context, name string) ([]byte, uint64, error) {
	v, f, err := e.s.FencedGet(ctx, name)
	if err != nil || f == 0 {
		return nil, f, err
	}
	return []byte(v), f, nil
}

// RedisSessionValues is the SessionKV of a Redis store: redisstore's
// SessionSet (the session check and the write in one script) and
// SessionGet.
func RedisSessionValues(s *redisstore.Store) server.SessionKV { return redisSessionKV{s} }

type redisSessionKV struct{ s *redisstore.Store }

func (r redisSessionKV) SessionWrite(ctx context.Context, id session.ID, version uint64, userID, name string, value []byte) error {
	return r.s.SessionSet(ctx, id, version, userID, name, value)
}

func (r redisSessionKV) SessionRead(ctx context.Context, userID, name string) ([]byte, bool, error) {
	return r.s.SessionGet(ctx, userID, name)
}
