package proof

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tenurekit/tenure/session"
)

func init() {
	register(&workload{
		name:     "session-commit",
		summary:  "a logout races a sensitive commit of the same session; nothing commits after the logout was acknowledged",
		supports: notOnEtcd("sessions"),
		setup:    sessionCommitSetup,
		worker:   bothModes(sessionCommitLoop),
		check:    sessionCommitCheck,
	})
}

// The business table of the SQL stores' sensitive commits, in the store's
// own database (the commit and the session check share a transaction).
const (
	transfersSQLite = `CREATE TABLE IF NOT EXISTS proof_transfers (run TEXT NOT NULL, mode TEXT NOT NULL, user TEXT NOT NULL, n INTEGER NOT NULL)`
	transfersPG     = `CREATE TABLE IF NOT EXISTS proof_transfers (run text NOT NULL, mode text NOT NULL, "user" text NOT NULL, n bigint NOT NULL)`
)

func sessionCommitSetup(ctx context.Context, w *workerEnv) error {
	if err := ledgerSetup(ctx, w); err != nil {
		return err
	}
	switch {
	case w.env.SQLite != nil:
		_, err := w.env.SQLite.DB().ExecContext(ctx, transfersSQLite)
		return err
	case w.pg != nil:
		_, err := w.pg.Exec(ctx, transfersPG)
		return err
	}
	return nil
}

// sessionCommitLoop: for a new user, create a session; then at once a
// transfer (check the session, think, commit) and a revoker that logs the
// user out everywhere as soon as the transfer's check has passed. The
// guarded mode checks the session at the commit (CheckSession in the
// transaction, SessionSet, WithSession); the control checks it only at
// the start of the request, as a middleware does, and commits regardless.
func sessionCommitLoop(ctx context.Context, w *workerEnv, mode string) error {
	m, err := session.New(w.sessionStore(), &session.Options{IdleTimeout: time.Hour, AbsoluteTimeout: 2 * time.Hour})
	if err != nil {
		return err
	}
	var mem memTransfers
	for n := 0; ctx.Err() == nil; n++ {
		w.gate.wait(ctx)
		octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		user := fmt.Sprintf("%s-%s-c%d", mode, w.spec.Proc, n)
		p := w.rec.Invoke(mode, "create", user, "", 0)
		tok, _, err := m.Create(octx, user, nil)
		p.End("", 0, err)
		if err != nil {
			cancel()
			continue
		}
		id := session.TokenID(tok)
		// commit runs one transfer recorded under key; point marks the
		// instant the commit is made, which the checker compares with the
		// revoke's acknowledgement.
		commit := func(key string, checked, think func()) {
			point := func() { w.rec.Invoke(mode, "commit-point", key, "", 0).End("", 0, nil) }
			p := w.rec.Invoke(mode, "commit", key, "", 0)
			var err error
			if mode == Guarded {
				err = w.guardedCommit(octx, &mem, id, user, checked, think, point)
			} else {
				err = w.controlCommit(octx, m, tok, user, checked, think, point)
			}
			p.End("", 0, err)
		}
		nop := func() {}
		// A transfer while the session is live, before any logout.
		commit(user+earlySuffix, nop, nop)
		checked := make(chan struct{})
		var once sync.Once
		onChecked := func() { once.Do(func() { close(checked) }) }
		var wg sync.WaitGroup
		wg.Go(func() {
			commit(user, onChecked, func() { w.sleep(ctx, w.spec.Think) })
			onChecked()
		})
		wg.Go(func() {
			select {
			case <-checked:
			case <-octx.Done():
			}
			p := w.rec.Invoke(mode, "revoke", user, "", 0)
			_, err := m.RevokeUser(octx, user)
			p.End("", 0, err)
		})
		wg.Wait()
		// A late request of the same session, after the logout: refused.
		w.gate.wait(ctx)
		commit(user+lateSuffix, nop, nop)
		cancel()
	}
	return nil
}

// The keys of the commits made before the race and after the logout.
const (
	earlySuffix = "/early"
	lateSuffix  = "/late"
)

// baseUser is the user of a commit's key.
func baseUser(key string) string {
	return strings.TrimSuffix(strings.TrimSuffix(key, lateSuffix), earlySuffix)
}

// guardedCommit is the transfer with the session checked at its commit.
func (w *workerEnv) guardedCommit(ctx context.Context, mem *memTransfers, id session.ID, user string, checked, think, point func()) error {
	switch {
	case w.env.SQLite != nil:
		db := w.env.SQLite.DB()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := w.env.SQLite.Tx(tx).CheckSession(ctx, id, 0); err != nil {
			return err
		}
		checked()
		if _, err := tx.ExecContext(ctx, `INSERT INTO proof_transfers (run, mode, user, n) VALUES (?, ?, ?, 1)`, w.spec.Prefix, Guarded, user); err != nil {
			return err
		}
		think()
		point()
		return tx.Commit()
	case w.pg != nil:
		tx, err := w.pg.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.WithoutCancel(ctx))
		if err := w.env.PG.PgxTx(tx).CheckSession(ctx, id, 0); err != nil {
			return err
		}
		checked()
		if _, err := tx.Exec(ctx, `INSERT INTO proof_transfers (run, mode, "user", n) VALUES ($1, $2, $3, 1)`, w.spec.Prefix, Guarded, user); err != nil {
			return err
		}
		think()
		point()
		return tx.Commit(ctx)
	case w.env.Redis != nil:
		// The check and the write are one script: the request was
		// authorized, then delayed, then writes.
		if _, err := w.env.Redis.Sessions().Load(ctx, id, 0); err != nil {
			return err
		}
		checked()
		think()
		point()
		return w.env.Redis.SessionSet(ctx, id, 0, user, "transfer", []byte("1"))
	case w.env.Mem != nil:
		return w.env.Mem.WithSession(ctx, id, 0, func() error {
			checked()
			mem.add(user)
			think()
			point()
			return nil
		})
	}
	return errors.New("session-commit: no store")
}

// controlCommit is the transfer as a middleware alone protects it: the
// session loaded at the start, the commit made whatever happened since.
func (w *workerEnv) controlCommit(ctx context.Context, m *session.Manager, tok session.Token, user string, checked, think, point func()) error {
	if _, err := m.Load(ctx, tok); err != nil {
		return err
	}
	checked()
	think()
	point()
	_, err := w.ledger.DB().ExecContext(ctx, `INSERT INTO proof_effects (run, mode, key, proc, fence, value) VALUES (?, ?, ?, ?, 0, 'transfer')`,
		w.spec.Prefix, Control, user, w.spec.Proc)
	return err
}

// memTransfers are the memory store's committed transfers.
type memTransfers struct {
	mu sync.Mutex
	n  map[string]int
}

func (t *memTransfers) add(user string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == nil {
		t.n = map[string]int{}
	}
	t.n[user]++
}

// sessionCommitCheck: a commit acknowledged whose commit point came after
// the user's revoke-all was acknowledged is a sensitive change made after
// the logout. Acknowledged guarded commits must be in the store.
func sessionCommitCheck(ctx context.Context, w *workerEnv, _ *runInfo, h *History, mode string) ModeResult {
	var m ModeResult
	m.countOps(h.Select(mode, "commit"))
	revoked := map[string]int64{}
	for _, op := range h.Select(mode, "revoke") {
		if op.Status == OK {
			revoked[op.Key] = op.Complete
		}
	}
	points := map[string]int64{}
	for _, op := range h.Select(mode, "commit-point") {
		points[op.Key] = op.Invoke
	}
	var bad []string
	acked := map[string]bool{}
	for _, op := range h.Select(mode, "commit") {
		if op.Status != OK {
			continue
		}
		acked[op.Key] = true
		at, ok := revoked[baseUser(op.Key)]
		if pt, has := points[op.Key]; ok && has && pt > at {
			m.StaleAdmitted++
			bad = append(bad, op.Key)
		}
	}
	sort.Strings(bad)
	for _, u := range bad {
		m.violate("user %s: a transfer committed after the user's logout everywhere was acknowledged", u)
	}
	if mode == Guarded {
		m.Lost = w.missingTransfers(ctx, acked)
		if m.Lost > 0 {
			m.violate("%d acknowledged transfers are not in the store", m.Lost)
		}
	}
	return m
}

// missingTransfers counts acknowledged guarded transfers absent from the
// store (SQL stores and Redis; the memory store's are in its workers).
func (w *workerEnv) missingTransfers(ctx context.Context, acked map[string]bool) int {
	missing := 0
	for key := range acked {
		user := baseUser(key)
		var n int
		var err error
		switch {
		case w.env.SQLite != nil:
			err = w.env.SQLite.DB().QueryRowContext(ctx, `SELECT count(*) FROM proof_transfers WHERE run = ? AND mode = ? AND user = ?`, w.spec.Prefix, Guarded, user).Scan(&n)
		case w.pg != nil:
			err = w.pg.QueryRow(ctx, `SELECT count(*) FROM proof_transfers WHERE run = $1 AND mode = $2 AND "user" = $3`, w.spec.Prefix, Guarded, user).Scan(&n)
		case w.env.Redis != nil:
			var v []byte
			var ok bool
			v, ok, err = w.env.Redis.SessionGet(ctx, user, "transfer")
			if ok {
				n, _ = strconv.Atoi(string(v))
			}
		default:
			n = 1
		}
		if err != nil || n < 1 {
			missing++
		}
	}
	return missing
}
