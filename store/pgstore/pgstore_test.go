package pgstore_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/store/pgstore"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// poolVia returns a pool on database dsn that connects through addr (a
// proxy) instead of the server's own address. With warm, every connection
// the pool may open is opened now and has the Store's statements prepared,
// so that a request made while the proxy drops replies really reaches the
// server (a cold connection would wait for its handshake or for pgx's
// prepare round trip, and the request would never be sent).
func poolVia(t *testing.T, dsn, addr string, db *pgstore.Store, warm bool) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Host = host
	var p uint16
	for _, c := range port {
		p = p*10 + uint16(c-'0')
	}
	cfg.ConnConfig.Port = p
	if warm {
		// A warmed connection is used as it is: a liveness ping through a
		// proxy that drops replies would discard it before the request.
		cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if warm {
		ctx := ctxT(t)
		conns := make([]*pgxpool.Conn, pool.Config().MaxConns)
		for i := range conns {
			if conns[i], err = pool.Acquire(ctx); err != nil {
				t.Fatal(err)
			}
			for _, sql := range pgstore.Statements(db) {
				if _, err := conns[i].Conn().Prepare(ctx, sql, sql); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, c := range conns {
			c.Release()
		}
	}
	return pool
}

// fresh returns a pool on a new database of the shared server and a
// migrated Store on it.
func fresh(t *testing.T, o *pgstore.Options) (*pgxpool.Pool, *pgstore.Store) {
	t.Helper()
	srv := testenv.SharedPostgres(t)
	pool := pgxPool(t, srv.NewDatabase(t))
	db := newPG(t, pool, o)
	if err := db.Migrate(ctxT(t)); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return pool, db
}

// resource is a business table guarded by Admit, for the conformance
// suite: FencedWrite runs Admit and the business write in one
// transaction; PlainWrite is the same write without Admit.
type resource struct {
	pool *pgxpool.Pool
	db   *pgstore.Store
}

func newResource(t *testing.T, pool *pgxpool.Pool, db *pgstore.Store) *resource {
	t.Helper()
	_, err := pool.Exec(ctxT(t), `CREATE TABLE IF NOT EXISTS items (name text PRIMARY KEY, value text NOT NULL)`)
	if err != nil {
		t.Fatal(err)
	}
	return &resource{pool: pool, db: db}
}

const upsertItem = `INSERT INTO items (name, value) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET value = excluded.value`

func (r *resource) FencedWrite(ctx context.Context, name string, f uint64, v string) error {
	return pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		if err := r.db.PgxTx(tx).Admit(ctx, name, f); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, upsertItem, name, v)
		return err
	})
}

func (r *resource) PlainWrite(ctx context.Context, name, v string) error {
	_, err := r.pool.Exec(ctx, upsertItem, name, v)
	return err
}

func (r *resource) Read(ctx context.Context, name string) (string, error) {
	var v string
	err := r.pool.QueryRow(ctx, `SELECT value FROM items WHERE name = $1`, name).Scan(&v)
	if err == pgx.ErrNoRows {
		return "", nil
	}
	return v, err
}
