package pgstore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurekit/tenure/session"
)

func dumpSessions(t *testing.T, pool *pgxpool.Pool) string {
	rows, err := pool.Query(ctxT(t), `SELECT id, user_id, encode(data, 'escape') FROM tenure.sessions`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var id, user, data string
		if err := rows.Scan(&id, &user, &data); err != nil {
			t.Fatal(err)
		}
		b.WriteString(id + " " + user + " " + data + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// Expired rows stay until swept; the sweep removes exactly those.
func TestSweepSessions(t *testing.T) {
	pool, db := fresh(t, nil)
	ctx := ctxT(t)
	short, _ := session.New(db.Sessions(), &session.Options{IdleTimeout: 50 * time.Millisecond, AbsoluteTimeout: time.Hour})
	longer, _ := session.New(db.Sessions(), &session.Options{IdleTimeout: time.Hour, AbsoluteTimeout: time.Hour})
	for range 3 {
		if _, _, err := short.Create(ctx, "u1", nil); err != nil {
			t.Fatal(err)
		}
	}
	keep, _, err := longer.Create(ctx, "u2", nil)
	if err != nil {
		t.Fatal(err)
	}
	for {
		ss, err := short.List(ctx, "u1")
		if err != nil {
			t.Fatal(err)
		}
		if len(ss) == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := strings.Count(dumpSessions(t, pool), "\n"); got != 4 {
		t.Fatalf("%d rows before the sweep, want 4 (expired rows stay)", got)
	}
	n, err := db.SweepSessions(ctx)
	if err != nil || n != 3 {
		t.Fatalf("SweepSessions = %d, %v; want 3", n, err)
	}
	if _, err := longer.Load(ctx, keep); err != nil {
		t.Fatalf("the live session after the sweep: %v", err)
	}
}
