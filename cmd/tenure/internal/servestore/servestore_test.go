package servestore_test

import (
	"strconv"

	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"github.com/redis/rueidis"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenurekit/tenure/cmd/tenure/internal/clienttest"
	"github.com/tenurekit/tenure/cmd/tenure/internal/servestore"
	"github.com/tenurekit/tenure/cmd/tenure/internal/storeopen"
	"github.com/tenurekit/tenure/internal/storeurl"
	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/server"
	"github.com/tenurekit/tenure/session"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// backend is a store opened as tenure serve opens it, with its views and
// what it really holds for a user's value (read around the views).
type backend struct {
	views server.Stores
	raw   func(t *testing.T, userID, name string) ([]byte, bool)
}

// open opens spec (the embedded default in a directory of its own for "")
// and wires its views with servestore.Stores.
func open(t *testing.T, spec string) (*storeopen.Stores, server.Stores) {
	return openWith(t, spec, &storeopen.Options{DataDir: t.TempDir(), CreateEmbedded: true})
}

// openWith is open with the store opened with o.
func openWith(t *testing.T, spec string, o *storeopen.Options) (*storeopen.Stores, server.Stores) {
	t.Helper()
	sp, err := storeurl.Parse(spec)
	if err != nil {
		t.Fatal(err)
	}
	st, err := storeopen.Open(t.Context(), sp, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	views, release, err := servestore.Stores(t.Context(), st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	return st, views
}

func rawRow(t *testing.T, row *sql.Row) ([]byte, bool) {
	t.Helper()
	var v []byte
	switch err := row.Scan(&v); {
	case errors.Is(err, sql.ErrNoRows):
		return nil, false
	case err != nil:
		t.Fatal(err)
	}
	return v, true
}

func backends(t *testing.T) map[string]func(t *testing.T) backend {
	return map[string]func(t *testing.T) backend{
		"memory": func(t *testing.T) backend {
			_, views := open(t, "memory")
			return backend{views: views, raw: func(t *testing.T, userID, name string) ([]byte, bool) {
				v, ok, err := views.SessionValues.SessionRead(t.Context(), userID, name)
				if err != nil {
					t.Fatal(err)
				}
				return v, ok
			}}
		},
		"sqlite": func(t *testing.T) backend {
			st, views := open(t, "")
			return backend{views: views, raw: func(t *testing.T, userID, name string) ([]byte, bool) {
				return rawRow(t, st.SQLite.DB().QueryRowContext(t.Context(),
					`SELECT value FROM "`+servestore.SessionValueTable+`" WHERE user_id = ? AND name = ?`, userID, name))
			}}
		},
		"postgres": func(t *testing.T) backend {
			dsn := testenv.SharedPostgres(t).NewDatabase(t)
			if err := clienttest.NewPG(t, clienttest.PGXPool(t, dsn), nil).Migrate(t.Context()); err != nil {
				t.Fatal(err)
			}
			st, views := open(t, dsn)
			return backend{views: views, raw: func(t *testing.T, userID, name string) ([]byte, bool) {
				var v []byte
				err := st.PGPool.QueryRow(t.Context(), `SELECT value FROM "tenure"."`+servestore.SessionValueTable+`" WHERE user_id = $1 AND name = $2`, userID, name).Scan(&v)
				if errors.Is(err, pgx.ErrNoRows) {
					return nil, false
				}
				if err != nil {
					t.Fatal(err)
				}
				return v, true
			}}
		},
		"redis": func(t *testing.T) backend {
			addr := testenv.SharedRedis(t).Addr()
			prefix := "servestore" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
			st, views := openWith(t, "redis://"+addr, &storeopen.Options{Prefix: prefix})
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			return backend{views: views, raw: func(t *testing.T, userID, name string) ([]byte, bool) {
				v, err := c.Do(t.Context(), c.B().Get().Key(st.Redis.SessionValueKey(userID, name)).Build()).AsBytes()
				if rueidis.IsRedisNil(err) {
					return nil, false
				}
				if err != nil {
					t.Fatal(err)
				}
				return v, true
			}}
		},
	}
}

func want(t *testing.T, b backend, userID, name string, v []byte) {
	t.Helper()
	got, ok := b.raw(t, userID, name)
	switch {
	case v == nil && ok:
		t.Fatalf("%s/%s holds %q, want nothing", userID, name, got)
	case v != nil && (!ok || !bytes.Equal(got, v)):
		t.Fatalf("%s/%s holds %q (present %v), want %q", userID, name, got, ok, v)
	}
}

// TestSessionValues: on memory, SQLite, PostgreSQL and Redis as tenure serve wires
// them, a value is written while its session is live and at the version
// given, and refused (ErrConflict, ErrNotFound, ErrInvalid) with nothing
// changed otherwise; a revoke that returns ends the writes racing it: no
// write lands after it.
func TestSessionValues(t *testing.T) {
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			b := mk(t)
			kv := b.views.SessionValues
			if kv == nil {
				t.Fatal("no SessionValues view")
			}
			m, err := session.New(b.views.Sessions, nil)
			if err != nil {
				t.Fatal(err)
			}
			tok, s, err := m.Create(ctx, "alice", map[string]string{"cart": "1"})
			if err != nil {
				t.Fatal(err)
			}
			id := session.TokenID(tok)

			if err := kv.SessionWrite(ctx, id, 0, "alice", "role", []byte("owner")); err != nil {
				t.Fatalf("write while live: %v", err)
			}
			want(t, b, "alice", "role", []byte("owner"))
			if v, ok, err := kv.SessionRead(ctx, "alice", "role"); err != nil || !ok || string(v) != "owner" {
				t.Fatalf("read %q %v %v", v, ok, err)
			}
			if v, ok, err := kv.SessionRead(ctx, "alice", "balance"); err != nil || ok || v != nil {
				t.Fatalf("a value never written reads %q %v %v", v, ok, err)
			}
			if err := kv.SessionWrite(ctx, id, s.Version()+1, "alice", "role", []byte("admin")); !errors.Is(err, session.ErrConflict) {
				t.Fatalf("write at another version: %v", err)
			}
			want(t, b, "alice", "role", []byte("owner"))
			if err := kv.SessionWrite(ctx, id, s.Version(), "alice", "role", []byte{}); err != nil {
				t.Fatalf("write at the version: %v", err)
			}
			want(t, b, "alice", "role", []byte{})
			for _, bad := range []func() error{
				func() error { return kv.SessionWrite(ctx, "zz", 0, "alice", "role", []byte("x")) },
				func() error { return kv.SessionWrite(ctx, id, 0, "alice", "", []byte("x")) },
				func() error { return kv.SessionWrite(ctx, id, 0, "alice", "ro\x01le", []byte("x")) },
				func() error { return kv.SessionWrite(ctx, id, 0, "alice", "\xff", []byte("x")) },
				func() error { return kv.SessionWrite(ctx, id, 0, "", "role", []byte("x")) },
				func() error { return kv.SessionWrite(ctx, id, 0, "alice", "role", make([]byte, 1<<20+1)) },
			} {
				if err := bad(); !errors.Is(err, session.ErrInvalid) {
					t.Fatalf("bad input: %v", err)
				}
			}
			want(t, b, "alice", "role", []byte{})
			if _, _, err := kv.SessionRead(ctx, "alice", ""); !errors.Is(err, session.ErrInvalid) {
				t.Fatalf("read without a name: %v", err)
			}

			// Writers race a revoke: once the revoke returned, what is
			// stored no longer changes, and every later write is refused.
			var (
				wrote atomic.Int64
				wg    sync.WaitGroup
				errs  = make(chan error, 4)
			)
			for w := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ; i++ {
						err := kv.SessionWrite(context.Background(), id, 0, "alice", "race", fmt.Appendf(nil, "w%d-%d", w, i))
						if errors.Is(err, session.ErrNotFound) {
							return
						}
						if err != nil {
							errs <- err
							return
						}
						wrote.Add(1)
					}
				}()
			}
			for deadline := time.Now().Add(10 * time.Second); wrote.Load() < 20 && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			if err := m.Revoke(ctx, id); err != nil {
				t.Fatal(err)
			}
			snap, ok := b.raw(t, "alice", "race")
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatalf("a racing write: %v", err)
			}
			if !ok || wrote.Load() < 20 {
				t.Fatalf("only %d writes before the revoke", wrote.Load())
			}
			want(t, b, "alice", "race", snap)
			if err := kv.SessionWrite(ctx, id, 0, "alice", "role", []byte("root")); !errors.Is(err, session.ErrNotFound) {
				t.Fatalf("write after revoke: %v", err)
			}
			want(t, b, "alice", "role", []byte{})
		})
	}
}
