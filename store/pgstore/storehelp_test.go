package pgstore_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/tenurekit/tenure/store/pgstore"
)

// newPG returns pgstore.New(pool, o), failing t on an error.
func newPG(t testing.TB, pool *pgxpool.Pool, o *pgstore.Options) *pgstore.Store {
	t.Helper()
	s, err := pgstore.New(pool, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// newPGDB returns pgstore.NewDB(db, o), failing t on an error.
func newPGDB(t testing.TB, db *sql.DB, o *pgstore.Options) *pgstore.Store {
	t.Helper()
	s, err := pgstore.NewDB(db, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// must returns s, or panics with err: for the conformance factories, which
// build stores where no *testing.T is at hand.
func must[S any](s S, err error) S {
	if err != nil {
		panic(err)
	}
	return s
}

// pgxPool returns a pgx connection pool for dsn, closed when the test
// ends. Connections are made lazily, so it can be created while the
// server is down.
func pgxPool(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatalf("pgx pool for %s: %v", dsn, err)
	}
	t.Cleanup(pool.Close)
	return pool
}
