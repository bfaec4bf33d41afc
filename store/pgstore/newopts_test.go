package pgstore_test

import (
	"errors"
	"github.com/tenurekit/tenure"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/store/pgstore"
)

func TestNewRefusesBadOptions(t *testing.T) {
	srv := testenv.SharedPostgres(t)
	pool := pgxPool(t, srv.NewDatabase(t))
	sqlDB := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { sqlDB.Close() })
	ctx := ctxT(t)
	before := schemas(t, pool)

	type ctor func(o *pgstore.Options) (*pgstore.Store, error)
	ctors := []struct {
		name string
		new  ctor
	}{
		{"New", func(o *pgstore.Options) (*pgstore.Store, error) { return pgstore.New(pool, o) }},
		{"NewDB", func(o *pgstore.Options) (*pgstore.Store, error) { return pgstore.NewDB(sqlDB, o) }},
		{"Open", func(o *pgstore.Options) (*pgstore.Store, error) { return pgstore.Open(ctx, pool, o) }},
		{"OpenDB", func(o *pgstore.Options) (*pgstore.Store, error) { return pgstore.OpenDB(ctx, sqlDB, o) }},
	}
	cases := []struct {
		name string
		new  ctor
		o    *pgstore.Options
	}{
		{"New nil pool", func(o *pgstore.Options) (*pgstore.Store, error) { return pgstore.New(nil, o) }, nil},
		{"NewDB nil db", func(o *pgstore.Options) (*pgstore.Store, error) { return pgstore.NewDB(nil, o) }, nil},
		{"Open nil pool", func(o *pgstore.Options) (*pgstore.Store, error) { return pgstore.Open(ctx, nil, o) }, nil},
		{"OpenDB nil db", func(o *pgstore.Options) (*pgstore.Store, error) { return pgstore.OpenDB(ctx, nil, o) }, nil},
	}
	for _, c := range ctors {
		for _, schema := range []string{"Bad-Name", "pg_tenure", strings.Repeat("a", 64), "te;st"} {
			cases = append(cases, struct {
				name string
				new  ctor
				o    *pgstore.Options
			}{c.name + " schema " + schema, c.new, &pgstore.Options{Schema: schema}})
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := c.new(c.o)
			if s != nil || !errors.Is(err, tenure.ErrInvalid) {
				t.Fatalf("= %v, %v; want nil and an error wrapping tenure.ErrInvalid", s, err)
			}
		})
	}
	if after := schemas(t, pool); !slices.Equal(before, after) {
		t.Fatalf("schemas changed from %v to %v", before, after)
	}
	if got := tables(t, pool); len(got) != 0 {
		t.Fatalf("tables created: %v", got)
	}

	// nil and zero Options are the defaults; New and NewDB write nothing.
	var stores []*pgstore.Store
	for _, c := range ctors[:2] {
		for _, o := range []*pgstore.Options{nil, {}} {
			s, err := c.new(o)
			if err != nil {
				t.Fatalf("%s(%+v): %v", c.name, o, err)
			}
			if s.Schema() != pgstore.DefaultSchema {
				t.Fatalf("%s(%+v): schema %q, want %q", c.name, o, s.Schema(), pgstore.DefaultSchema)
			}
			stores = append(stores, s)
		}
	}
	if after := schemas(t, pool); !slices.Equal(before, after) {
		t.Fatalf("New changed the schemas from %v to %v", before, after)
	}
	if err := stores[0].Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range stores {
		works(t, pool, s)
	}
}
