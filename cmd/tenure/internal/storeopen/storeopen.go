// Package storeopen opens the store a --store value names with the
// defaults a service uses (PostgreSQL schema "tenure", Redis prefix
// "tenure:", etcd prefix "tenure/", the embedded SQLite file in the data
// directory), for tenure's operator commands. It never creates a database
// or a schema: a command that only reads must not change what it reads.
package storeopen

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/rueidis"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/internal/storeurl"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/retention"
	"github.com/tenurekit/tenure/schedule"
	"github.com/tenurekit/tenure/session"
	"github.com/tenurekit/tenure/store/etcdstore"
	"github.com/tenurekit/tenure/store/memstore"
	"github.com/tenurekit/tenure/store/pgstore"
	"github.com/tenurekit/tenure/store/redisstore"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

// ErrNotSupported reports a primitive the store does not keep.
var ErrNotSupported = errors.New("the store does not keep this primitive")

// ErrNoData reports an embedded or SQLite store whose file does not exist.
var ErrNoData = errors.New("no tenure data")

// Options say where a service keeps its state. Nil means the defaults.
type Options struct {
	// DataDir holds the embedded default's SQLite file, tenure.db.
	// Default DefaultDataDir().
	DataDir string
	// Schema is the PostgreSQL schema. Default "tenure".
	Schema string
	// Prefix is the Redis or etcd key prefix. Default the store's own
	// ("tenure:" on Redis, "tenure/" on etcd).
	Prefix string
	// CreateEmbedded creates the embedded default's file (and the data
	// directory, mode 0700) when it does not exist, for a service that
	// keeps its state there (tenure serve). Default false: the operator
	// commands only read, and a missing file is ErrNoData.
	CreateEmbedded bool
}

// DefaultDataDir is where the embedded default keeps its file:
// $XDG_DATA_HOME/tenure, else ~/.local/share/tenure, else ./tenure-data.
func DefaultDataDir() string {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "tenure")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "share", "tenure")
	}
	return "tenure-data"
}

// EmbeddedFile is the embedded default's SQLite file in dir.
func EmbeddedFile(dir string) string { return filepath.Join(dir, "tenure.db") }

// Stores are the views of one opened store; a nil view is a primitive the
// store does not keep.
type Stores struct {
	Kind   storeurl.Kind
	Target string

	Leases      lease.Store
	Idempotency idempotency.Store
	Sessions    session.Store
	Limits      ratelimit.Store
	Schedules   schedule.Store

	// The store itself, for what only it offers: exactly one is set.
	Mem    *memstore.Store
	SQLite *sqlitestore.Store
	PG     *pgstore.Store
	Redis  *redisstore.Store
	Etcd   *etcdstore.Store
	// PGPool is the PostgreSQL pool (with PG), for the service's own
	// tables next to the store's.
	PGPool *pgxpool.Pool

	closers []func()
}

// Sweeper returns the store's sweep (retention.Sweeper), or nil for a
// store whose records all expire on their own (etcd). On Redis, only
// schedule records need it.
func (s *Stores) Sweeper() retention.Sweeper {
	switch {
	case s.Mem != nil:
		return s.Mem
	case s.SQLite != nil:
		return s.SQLite
	case s.PG != nil:
		return s.PG
	case s.Redis != nil:
		return s.Redis
	}
	return nil
}

// Close releases the connections.
func (s *Stores) Close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}

// MigrateCommand is the command that migrates the store spec names (in
// schema, on PostgreSQL), as an operator types it: the URL without its
// password, which the command takes from the environment.
func MigrateCommand(spec storeurl.Spec, schema string) string {
	// A password shown masked is left out: the command takes it from
	// TENURE_STORE_PASSWORD (or the file TENURE_STORE_PASSWORD_FILE names).
	cmd := "tenure migrate up --store " + shellQuote(strings.Replace(spec.Redacted(), ":xxxxx@", "@", 1))
	if spec.Kind == storeurl.Postgres && schema != "" && schema != "tenure" {
		cmd += " --schema " + shellQuote(schema)
	}
	return cmd
}

// sqliteHint says how to create a SQLite file that does not exist.
func sqliteHint(spec storeurl.Spec, opt Options, err error) string {
	if !errors.Is(err, os.ErrNotExist) {
		return ""
	}
	if spec.Kind == storeurl.Embedded {
		return fmt.Sprintf(" (create it with `tenure migrate up --data-dir %s`, or run `tenure serve`, which creates it)", shellQuote(opt.DataDir))
	}
	return fmt.Sprintf(" (create it with `%s`)", MigrateCommand(spec, ""))
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:@,+=%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Open opens the store spec names.
func Open(ctx context.Context, spec storeurl.Spec, o *Options) (*Stores, error) {
	var opt Options
	if o != nil {
		opt = *o
	}
	if opt.DataDir == "" {
		opt.DataDir = DefaultDataDir()
	}
	if opt.Schema == "" {
		opt.Schema = "tenure"
	}
	s := &Stores{Kind: spec.Kind, Target: spec.Redacted()}
	switch spec.Kind {
	case storeurl.Memory:
		m, err := memstore.New(nil)
		if err != nil {
			return nil, err
		}
		s.Mem = m
		s.Leases, s.Idempotency, s.Sessions, s.Limits, s.Schedules = m.Leases(), m.Idempotency(), m.Sessions(), m.Limits(), m.Schedules()
	case storeurl.Embedded, storeurl.SQLite:
		path := spec.Path
		if spec.Kind == storeurl.Embedded {
			path = EmbeddedFile(opt.DataDir)
			s.Target = "sqlite:" + path
		}
		if _, err := os.Stat(path); err != nil {
			if !opt.CreateEmbedded || spec.Kind != storeurl.Embedded || !errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("%w at %s: %v%s", ErrNoData, path, err, sqliteHint(spec, opt, err))
			}
			if err := os.MkdirAll(opt.DataDir, 0o700); err != nil {
				return nil, fmt.Errorf("data directory %s: %w", opt.DataDir, err)
			}
		}
		// A service's own file is brought to the current version; the
		// operator commands only check it (`tenure migrate up` applies).
		mode := sqlitestore.MigrateCheck
		if opt.CreateEmbedded {
			mode = sqlitestore.MigrateApply
		}
		db, err := sqlitestore.Open(ctx, path, &sqlitestore.Options{Migrate: mode})
		if err != nil {
			return nil, err
		}
		s.SQLite = db
		s.closers = append(s.closers, func() { db.Close() })
		s.Leases, s.Idempotency, s.Sessions, s.Limits, s.Schedules = db.Leases(), db.Idempotency(), db.Sessions(), db.Limits(), db.Schedules()
	case storeurl.Postgres:
		pool, err := pgxpool.New(ctx, spec.URL)
		if err != nil {
			return nil, fmt.Errorf("postgres %s: %w", spec.Redacted(), err)
		}
		if err := pool.Ping(ctx); err != nil {
			pool.Close()
			return nil, fmt.Errorf("postgres %s: %w", spec.Redacted(), err)
		}
		var exists bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM information_schema.schemata WHERE schema_name = $1)`, opt.Schema).Scan(&exists); err != nil {
			pool.Close()
			return nil, fmt.Errorf("postgres %s: %w", spec.Redacted(), err)
		}
		if !exists {
			pool.Close()
			return nil, fmt.Errorf("%w: postgres %s has no schema %q (create it with `%s`, or name the schema your service uses with --schema)", ErrNoData, spec.Redacted(), opt.Schema, MigrateCommand(spec, opt.Schema))
		}
		db, err := pgstore.New(pool, &pgstore.Options{Schema: opt.Schema})
		if err != nil {
			pool.Close()
			return nil, err
		}
		// Follow the leases table's persistence, whichever the service chose.
		if u, err := db.LeasesUnlogged(ctx); err == nil && u {
			if db, err = pgstore.New(pool, &pgstore.Options{Schema: opt.Schema, UnloggedLeases: true}); err != nil {
				pool.Close()
				return nil, err
			}
		}
		if err := db.Check(ctx); err != nil {
			pool.Close()
			if errors.Is(err, pgstore.ErrSchemaVersion) {
				return nil, fmt.Errorf("%w (bring it to this version with `%s`)", err, MigrateCommand(spec, opt.Schema))
			}
			return nil, err
		}
		s.PG = db
		s.PGPool = pool
		s.closers = append(s.closers, pool.Close)
		s.Leases, s.Idempotency, s.Sessions, s.Limits, s.Schedules = db.Leases(), db.Idempotency(), db.Sessions(), db.Limits(), db.Schedules()
	case storeurl.Redis:
		ro, err := rueidis.ParseURL(spec.URL)
		if err != nil {
			return nil, fmt.Errorf("redis %s: the URL does not parse", spec.Redacted())
		}
		ro.DisableRetry = true
		c, err := rueidis.NewClient(ro)
		if err != nil {
			return nil, fmt.Errorf("redis %s: %w", spec.Redacted(), err)
		}
		db, err := redisstore.New(c, &redisstore.Options{Prefix: opt.Prefix, AllowEviction: true})
		if err != nil {
			c.Close()
			return nil, err
		}
		s.Redis = db
		s.closers = append(s.closers, c.Close)
		s.Leases, s.Idempotency, s.Sessions, s.Limits, s.Schedules = db.Leases(), db.Idempotency(), db.Sessions(), db.Limits(), db.Schedules()
	case storeurl.Etcd:
		c, err := clientv3.New(clientv3.Config{Endpoints: spec.Endpoints, DialTimeout: 5 * time.Second, Context: ctx})
		if err != nil {
			return nil, fmt.Errorf("etcd %s: %w", spec.Redacted(), err)
		}
		db, err := etcdstore.New(c, &etcdstore.Options{Prefix: opt.Prefix})
		if err != nil {
			c.Close()
			return nil, err
		}
		s.Etcd = db
		s.closers = append(s.closers, func() { c.Close() })
		s.Leases = db.Leases()
	default:
		return nil, fmt.Errorf("%w: %s", storeurl.ErrInvalid, spec.Kind)
	}
	return s, nil
}

// Need returns view, or an error naming the primitive when the store does
// not keep it.
func Need[T comparable](s *Stores, view T, primitive string) (T, error) {
	var zero T
	if view == zero {
		return zero, fmt.Errorf("%w: %s on %s", ErrNotSupported, primitive, s.Kind)
	}
	return view, nil
}
