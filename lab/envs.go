package lab

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/rueidis"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenurekit/tenure/internal/storeurl"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/etcdstore"
	"github.com/tenurekit/tenure/store/memstore"
	"github.com/tenurekit/tenure/store/pgstore"
	"github.com/tenurekit/tenure/store/redisstore"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

// Open prepares the Envs that a --store value names:
//
//	""                      the embedded default: a SQLite file in a new temp dir, and memory
//	memory                  the in-process store
//	sqlite:PATH             a SQLite file (created if missing)
//	redis://HOST:PORT/…     Redis or Redis Cluster (rueidis URL syntax)
//	postgres://…            PostgreSQL (pgx URL syntax); uses the schema tenure_lab
//	etcd://HOST:PORT[,…]    etcd
//
// The caller closes every Env.
func Open(ctx context.Context, spec string) ([]*Env, error) {
	return OpenPrefix(ctx, spec, "lab/"+rand.Text()[:10]+"/")
}

// OpenPrefix is Open with the given key prefix instead of a random one, so
// several processes can work on the same keys.
func OpenPrefix(ctx context.Context, spec, prefix string) ([]*Env, error) {
	u, err := storeurl.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	switch u.Kind {
	case storeurl.Embedded:
		sq, err := OpenSQLite(ctx, "", prefix)
		if err != nil {
			return nil, err
		}
		mem, err := OpenMemory(prefix)
		if err != nil {
			sq.Close()
			return nil, err
		}
		return []*Env{sq, mem}, nil
	case storeurl.Memory:
		return one(OpenMemory(prefix))
	case storeurl.SQLite:
		return one(OpenSQLite(ctx, u.Path, prefix))
	case storeurl.Redis:
		return one(OpenRedis(ctx, u.URL, prefix))
	case storeurl.Postgres:
		return one(OpenPostgres(ctx, u.URL, prefix))
	default: // storeurl.Etcd
		return one(openEtcd(ctx, u, prefix))
	}
}

func one(e *Env, err error) ([]*Env, error) {
	if err != nil {
		return nil, err
	}
	return []*Env{e}, nil
}

// OpenMemory prepares the in-process store.
func OpenMemory(prefix string) (*Env, error) {
	ms, err := memstore.New(nil)
	if err != nil {
		return nil, err
	}
	ledger, err := tempLedger(context.Background())
	if err != nil {
		return nil, err
	}
	env := &Env{
		Store: "memory", Detail: "in-process", Prefix: prefix,
		Mem:         ms,
		Leases:      ms.Leases(),
		Resource:    &memResource{s: ms},
		ReleasePath: fixedPath("mutex"),
	}
	env.Ledger = ledger.Resource
	env.OnClose(ledger.Close)
	return env, nil
}

// OpenSQLite prepares a SQLite file; path "" means a new temp dir.
func OpenSQLite(ctx context.Context, path, prefix string) (*Env, error) {
	var cleanup func() error
	if path == "" {
		dir, err := os.MkdirTemp("", "tenure-lab-")
		if err != nil {
			return nil, err
		}
		path = filepath.Join(dir, "tenure.db")
		cleanup = func() error { return os.RemoveAll(dir) }
	}
	db, err := sqlitestore.Open(ctx, path, nil)
	if err != nil {
		if cleanup != nil {
			cleanup()
		}
		return nil, err
	}
	r, err := newSQLiteResource(ctx, db)
	if err != nil {
		db.Close()
		return nil, err
	}
	env := &Env{
		Store: "sqlite", Detail: path, Prefix: prefix,
		SQLite: db,
		Leases: db.Leases(), Resource: r, Ledger: r,
		ReleasePath: fixedPath("sql"),
	}
	if cleanup != nil {
		env.OnClose(cleanup)
	}
	env.OnClose(db.Close)
	return env, nil
}

// OpenRedis prepares Redis or Redis Cluster at url.
func OpenRedis(ctx context.Context, u, prefix string) (*Env, error) {
	if _, err := storeurl.Parse(u); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	opt, err := rueidis.ParseURL(u)
	if err != nil {
		return nil, fmt.Errorf("lab: redis %s: the URL does not parse", redactURL(u))
	}
	opt.DisableRetry = true
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("lab: redis %s: %w", redactURL(u), err)
	}
	rs, err := redisstore.New(c, &redisstore.Options{Prefix: "tenure:" + prefix})
	if err != nil {
		c.Close()
		return nil, err
	}
	if err := rs.Check(ctx); err != nil {
		c.Close()
		return nil, err
	}
	ledger, err := tempLedger(ctx)
	if err != nil {
		c.Close()
		return nil, err
	}
	env := &Env{
		Store: "redis", Detail: redactURL(u), Prefix: prefix,
		Redis:       rs,
		redis:       c,
		Leases:      rs.Leases(),
		Resource:    &redisResource{s: rs, c: c, plain: "tenure:" + prefix + "plain:"},
		Ledger:      ledger.Resource,
		ReleasePath: rs.ReleasePath,
	}
	env.OnClose(func() error { c.Close(); return nil })
	env.OnClose(ledger.Close)
	return env, nil
}

// OpenPostgres prepares PostgreSQL at url, in the schema tenure_lab.
func OpenPostgres(ctx context.Context, u, prefix string) (*Env, error) {
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("lab: postgres %s: %w", redactURL(u), err)
	}
	const schema = "tenure_lab"
	db, err := pgstore.New(pool, &pgstore.Options{Schema: schema})
	if err != nil {
		pool.Close()
		return nil, err
	}
	if err := db.Migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	r := &pgResource{s: db, pool: pool, table: schema + ".lab_resource"}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+r.table+` (name text PRIMARY KEY, value text NOT NULL)`); err != nil {
		pool.Close()
		return nil, fmt.Errorf("lab: %w", err)
	}
	env := &Env{
		Store: "postgres", Detail: redactURL(u), Prefix: prefix,
		PG:     db,
		pool:   pool,
		Leases: db.Leases(), Resource: r, Ledger: r,
		ReleasePath: fixedPath("sql"),
	}
	env.OnClose(func() error { pool.Close(); return nil })
	return env, nil
}

// OpenEtcd prepares etcd at etcd://host:port[,host:port].
func OpenEtcd(ctx context.Context, u, prefix string) (*Env, error) {
	spec, err := storeurl.Parse(u)
	if err == nil && spec.Kind != storeurl.Etcd {
		err = fmt.Errorf("%w: not an etcd URL", storeurl.ErrInvalid)
	}
	if err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	return openEtcd(ctx, spec, prefix)
}

func openEtcd(ctx context.Context, u storeurl.Spec, prefix string) (*Env, error) {
	eps := u.Endpoints
	c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("lab: etcd: %w", err)
	}
	es, err := etcdstore.New(c, &etcdstore.Options{Prefix: "tenure/" + prefix})
	if err != nil {
		c.Close()
		return nil, err
	}
	ledger, err := tempLedger(ctx)
	if err != nil {
		c.Close()
		return nil, err
	}
	env := &Env{
		Store: "etcd", Detail: strings.Join(eps, ","), Prefix: prefix,
		Etcd:        es,
		Leases:      es.Leases(),
		Resource:    &etcdResource{s: es, c: c, plain: "tenure/" + prefix + "plain/"},
		Ledger:      ledger.Resource,
		ReleasePath: fixedPath("txn"),
	}
	env.OnClose(c.Close)
	env.OnClose(ledger.Close)
	return env, nil
}

func fixedPath(p string) func(context.Context) (string, error) {
	return func(context.Context) (string, error) { return p, nil }
}

// redactURL drops a password from a store URL before it is printed.
func redactURL(u string) string { return storeurl.Redact(u) }

// tempLedger is an embedded SQLite file that serves as the business
// database for stores that are not one.
func tempLedger(ctx context.Context) (*Env, error) {
	return OpenSQLite(ctx, "", "")
}

// memResource: guarded writes through memstore, plain writes to a map.
type memResource struct {
	s     *memstore.Store
	mu    sync.Mutex
	plain map[string]string
}

func (r *memResource) FencedWrite(ctx context.Context, name string, f uint64, v string) error {
	return r.s.FencedSet(ctx, name, f, []byte(v))
}

func (r *memResource) HolderWrite(ctx context.Context, l *lease.Lease, name, v string) error {
	return r.s.HolderSet(ctx, l, name, []byte(v))
}

func (r *memResource) PlainWrite(_ context.Context, name, v string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.plain == nil {
		r.plain = map[string]string{}
	}
	r.plain[name] = v
	return nil
}

func (r *memResource) Read(ctx context.Context, name string) (string, error) {
	r.mu.Lock()
	v, ok := r.plain[name]
	r.mu.Unlock()
	if ok {
		return v, nil
	}
	b, _, err := r.s.FencedGet(ctx, name)
	return string(b), err
}

// sqliteResource: a business table next to the store's tables; guarded
// writes run Admit or CheckHolder in the same transaction as the UPDATE.
type sqliteResource struct {
	s *sqlitestore.Store
}

const sqliteTable = "tenure_lab_resource"

func newSQLiteResource(ctx context.Context, s *sqlitestore.Store) (*sqliteResource, error) {
	_, err := s.DB().ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+sqliteTable+` (name TEXT PRIMARY KEY, value TEXT NOT NULL)`)
	if err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	return &sqliteResource{s: s}, nil
}

func (r *sqliteResource) inTx(ctx context.Context, check func(*sql.Tx) error, name, v string) error {
	tx, err := r.s.DB().BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if check != nil {
		if err := check(tx); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO `+sqliteTable+` (name, value) VALUES (?, ?)
		ON CONFLICT (name) DO UPDATE SET value = excluded.value`, name, v); err != nil {
		return err
	}
	return tx.Commit()
}

func (r *sqliteResource) FencedWrite(ctx context.Context, name string, f uint64, v string) error {
	return r.inTx(ctx, func(tx *sql.Tx) error { return r.s.Tx(tx).Admit(ctx, name, f) }, name, v)
}

func (r *sqliteResource) HolderWrite(ctx context.Context, l *lease.Lease, name, v string) error {
	return r.inTx(ctx, func(tx *sql.Tx) error { return r.s.Tx(tx).CheckHolder(ctx, l) }, name, v)
}

func (r *sqliteResource) PlainWrite(ctx context.Context, name, v string) error {
	return r.inTx(ctx, nil, name, v)
}

func (r *sqliteResource) Read(ctx context.Context, name string) (string, error) {
	var v string
	err := r.s.DB().QueryRowContext(ctx, `SELECT value FROM `+sqliteTable+` WHERE name = ?`, name).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return v, err
}

// pgResource: the same business table in PostgreSQL.
type pgResource struct {
	s     *pgstore.Store
	pool  *pgxpool.Pool
	table string
}

func (r *pgResource) inTx(ctx context.Context, check func(pgx.Tx) error, name, v string) error {
	return pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		if check != nil {
			if err := check(tx); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+r.table+` (name, value) VALUES ($1, $2)
			ON CONFLICT (name) DO UPDATE SET value = excluded.value`, name, v)
		return err
	})
}

func (r *pgResource) FencedWrite(ctx context.Context, name string, f uint64, v string) error {
	return r.inTx(ctx, func(tx pgx.Tx) error { return r.s.PgxTx(tx).Admit(ctx, name, f) }, name, v)
}

func (r *pgResource) HolderWrite(ctx context.Context, l *lease.Lease, name, v string) error {
	return r.inTx(ctx, func(tx pgx.Tx) error { return r.s.PgxTx(tx).CheckHolder(ctx, l) }, name, v)
}

func (r *pgResource) PlainWrite(ctx context.Context, name, v string) error {
	return r.inTx(ctx, nil, name, v)
}

func (r *pgResource) Read(ctx context.Context, name string) (string, error) {
	var v string
	err := r.pool.QueryRow(ctx, `SELECT value FROM `+r.table+` WHERE name = $1`, name).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return v, err
}

// redisResource: guarded writes through redisstore; plain writes are SETs.
type redisResource struct {
	s     *redisstore.Store
	c     rueidis.Client
	plain string
}

func (r *redisResource) FencedWrite(ctx context.Context, name string, f uint64, v string) error {
	return r.s.FencedSet(ctx, name, f, []byte(v))
}

func (r *redisResource) HolderWrite(ctx context.Context, l *lease.Lease, name, v string) error {
	return r.s.HolderSet(ctx, l, name, []byte(v))
}

func (r *redisResource) PlainWrite(ctx context.Context, name, v string) error {
	return r.c.Do(ctx, r.c.B().Set().Key(r.plain+name).Value(v).Ex(time.Hour).Build()).Error()
}

func (r *redisResource) Read(ctx context.Context, name string) (string, error) {
	v, err := r.c.Do(ctx, r.c.B().Get().Key(r.plain+name).Build()).ToString()
	if err == nil {
		return v, nil
	}
	if !rueidis.IsRedisNil(err) {
		return "", err
	}
	b, _, err := r.s.FencedGet(ctx, name)
	return string(b), err
}

// etcdResource: guarded writes through etcdstore (FencedPut, and Compare in
// the caller's own txn); plain writes are Puts.
type etcdResource struct {
	s     *etcdstore.Store
	c     *clientv3.Client
	plain string
}

func (r *etcdResource) FencedWrite(ctx context.Context, name string, f uint64, v string) error {
	return r.s.FencedPut(ctx, name, v, f)
}

func (r *etcdResource) HolderWrite(ctx context.Context, l *lease.Lease, name, v string) error {
	resp, err := r.c.Txn(ctx).If(r.s.Compare(l)).Then(clientv3.OpPut(r.plain+name, v)).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return lease.ErrNotHeld
	}
	return nil
}

func (r *etcdResource) PlainWrite(ctx context.Context, name, v string) error {
	_, err := r.c.Put(ctx, r.plain+name, v)
	return err
}

func (r *etcdResource) Read(ctx context.Context, name string) (string, error) {
	resp, err := r.c.Get(ctx, r.plain+name)
	if err != nil {
		return "", err
	}
	if len(resp.Kvs) > 0 {
		return string(resp.Kvs[0].Value), nil
	}
	v, _, err := r.s.FencedGet(ctx, name)
	return v, err
}
