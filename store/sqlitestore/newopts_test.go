package sqlitestore_test

import (
	"database/sql"
	"errors"
	"github.com/tenurekit/tenure"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

func TestNewRefusesBadOptions(t *testing.T) {
	ctx := t.Context()
	bad := []struct {
		name string
		o    *sqlitestore.Options
	}{
		{"prefix with a dash", &sqlitestore.Options{TablePrefix: "bad-prefix"}},
		{"prefix starting with a digit", &sqlitestore.Options{TablePrefix: "1x_"}},
		{"prefix sqlite_", &sqlitestore.Options{TablePrefix: "sqlite_x"}},
		{"prefix too long", &sqlitestore.Options{TablePrefix: strings.Repeat("p", 49)}},
		{"negative Migrate", &sqlitestore.Options{Migrate: -1}},
		{"unknown Migrate", &sqlitestore.Options{Migrate: sqlitestore.MigrateSkip + 1}},
	}
	refused := func(t *testing.T, s *sqlitestore.Store, err error) {
		t.Helper()
		if s != nil || !errors.Is(err, tenure.ErrInvalid) {
			t.Fatalf("= %v, %v; want nil and an error wrapping tenure.ErrInvalid", s, err)
		}
	}
	// Open creates no file.
	for _, c := range append(bad, struct {
		name string
		o    *sqlitestore.Options
	}{"MigrateApply with a bad prefix", &sqlitestore.Options{TablePrefix: "a b", Migrate: sqlitestore.MigrateApply}}) {
		t.Run("Open "+c.name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := sqlitestore.Open(ctx, filepath.Join(dir, "tenure.db"), c.o)
			refused(t, s, err)
			if m, _ := filepath.Glob(filepath.Join(dir, "*")); len(m) != 0 {
				t.Fatalf("Open created %v", m)
			}
		})
	}
	t.Run("Open empty path", func(t *testing.T) {
		s, err := sqlitestore.Open(ctx, "", nil)
		refused(t, s, err)
	})
	t.Run("New nil db", func(t *testing.T) {
		s, err := sqlitestore.New(ctx, nil, &sqlitestore.Options{Migrate: sqlitestore.MigrateApply})
		refused(t, s, err)
	})
	// New leaves the caller's database as it was, even when asked to
	// migrate.
	db, err := sql.Open("sqlite", sqlitestore.DSN(tempPath(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, c := range bad {
		t.Run("New "+c.name, func(t *testing.T) {
			o := *c.o
			if o.Migrate == sqlitestore.MigrateDefault {
				o.Migrate = sqlitestore.MigrateApply
			}
			s, err := sqlitestore.New(ctx, db, &o)
			refused(t, s, err)
			var n int
			if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master`).Scan(&n); err != nil || n != 0 {
				t.Fatalf("New left %d schema objects (%v)", n, err)
			}
		})
	}

	// nil and zero Options are the defaults: Open applies the migrations
	// to tables named tenure_*, New on that database checks them.
	for _, c := range []struct {
		name string
		o    *sqlitestore.Options
	}{{"nil", nil}, {"zero", &sqlitestore.Options{}}} {
		t.Run(c.name, func(t *testing.T) {
			path := tempPath(t)
			s := open(t, path, c.o)
			tok := lease.NewToken()
			if _, err := s.Leases().Acquire(ctx, "k", tok, time.Minute); err != nil {
				t.Fatal(err)
			}
			var n int
			if err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM `+sqlitestore.DefaultTablePrefix+`leases`).Scan(&n); err != nil || n != 1 {
				t.Fatalf("%d rows in %sleases (%v), want 1", n, sqlitestore.DefaultTablePrefix, err)
			}
			ns, err := sqlitestore.New(ctx, s.DB(), c.o)
			if err != nil {
				t.Fatal(err)
			}
			if err := ns.Leases().Release(ctx, "k", tok); err != nil {
				t.Fatal(err)
			}
		})
	}
}
