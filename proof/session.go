package proof

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/tenurekit/tenure/session"
)

func init() {
	register(&workload{
		name:     "session",
		summary:  "late saves, rotations (again and again, into the revocation) and revocations race on the same sessions; a revoked session never loads again",
		supports: notOnEtcd("sessions"),
		setup:    ledgerSetup,
		worker:   bothModes(sessionLoop),
		check:    sessionCheck,
	})
}

// sessionOps is one mode's way to handle sessions: tenure's Manager, or
// the control's plain table (unconditional saves, last write wins).
type sessionOps interface {
	create(ctx context.Context, user string) (tok string, err error)
	load(ctx context.Context, tok string) error
	lateSave(ctx context.Context, tok string, think func()) error
	rotate(ctx context.Context, tok string) (string, error)
	revokeUser(ctx context.Context, user string) error
}

// sessionLoop: for a new user, create a session; then at once a late
// saver (load, think, save), a rotator (load, rotate) and a revoker
// (revoke every session of the user, halfway through the saver's think);
// then load every token the user ever had: none may load once the
// revocation was acknowledged.
func sessionLoop(ctx context.Context, w *workerEnv, mode string) error {
	var ops sessionOps
	if mode == Guarded {
		m, err := session.New(w.sessionStore(), &session.Options{IdleTimeout: time.Hour, AbsoluteTimeout: 2 * time.Hour})
		if err != nil {
			return err
		}
		ops = &managerOps{m: m, toks: map[string]session.Token{}}
	} else {
		ops = &naiveSessions{w: w}
	}
	for n := 0; ctx.Err() == nil; n++ {
		w.gate.wait(ctx)
		octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		user := fmt.Sprintf("%s-%s-%d", mode, w.spec.Proc, n)
		p := w.rec.Invoke(mode, "create", user, "", 0)
		tok, err := ops.create(octx, user)
		p.End("", 0, err)
		if err != nil {
			cancel()
			continue
		}
		var mu sync.Mutex
		toks := []string{tok}
		var wg sync.WaitGroup
		wg.Go(func() {
			p := w.rec.Invoke(mode, "save", user, "", 0)
			p.End("", 0, ops.lateSave(octx, tok, func() { w.sleep(ctx, w.spec.Think) }))
		})
		revoked := make(chan struct{})
		wg.Go(func() {
			// Rotate the newest session again and again until the
			// revocation has returned, so that rotations land while it
			// is in progress too.
			cur := tok
			for i := 0; i < 200; i++ {
				select {
				case <-revoked:
					i = 200 // one more after the revocation returned
				default:
				}
				p := w.rec.Invoke(mode, "rotate", user, "", 0)
				nt, err := ops.rotate(octx, cur)
				p.End("", 0, err)
				if err != nil {
					if i == 200 {
						return
					}
					w.sleep(ctx, time.Millisecond)
					continue
				}
				mu.Lock()
				toks = append(toks, nt)
				mu.Unlock()
				cur = nt
				w.sleep(ctx, time.Millisecond)
			}
		})
		wg.Go(func() {
			defer close(revoked)
			w.sleep(ctx, w.spec.Think/2)
			p := w.rec.Invoke(mode, "revoke", user, "", 0)
			p.End("", 0, ops.revokeUser(octx, user))
		})
		wg.Wait()
		w.gate.wait(ctx)
		for i, t := range toks {
			p := w.rec.Invoke(mode, "load", user, fmt.Sprint(i), 0)
			p.End("", 0, ops.load(octx, t))
		}
		cancel()
	}
	return nil
}

type managerOps struct {
	m    *session.Manager
	mu   sync.Mutex
	toks map[string]session.Token
}

func (o *managerOps) put(t session.Token) string {
	k := rand.Text()
	o.mu.Lock()
	o.toks[k] = t
	o.mu.Unlock()
	return k
}

func (o *managerOps) get(k string) session.Token {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.toks[k]
}

func (o *managerOps) create(ctx context.Context, user string) (string, error) {
	t, _, err := o.m.Create(ctx, user, map[string]string{"n": "0"})
	if err != nil {
		return "", err
	}
	return o.put(t), nil
}

func (o *managerOps) load(ctx context.Context, tok string) error {
	_, err := o.m.Load(ctx, o.get(tok))
	return err
}

func (o *managerOps) lateSave(ctx context.Context, tok string, think func()) error {
	s, err := o.m.Load(ctx, o.get(tok))
	if err != nil {
		return err
	}
	think()
	s.Set("n", "1")
	return o.m.Save(ctx, s)
}

func (o *managerOps) rotate(ctx context.Context, tok string) (string, error) {
	s, err := o.m.Load(ctx, o.get(tok))
	if err != nil {
		return "", err
	}
	t, err := o.m.Rotate(ctx, s)
	if err != nil {
		return "", err
	}
	return o.put(t), nil
}

func (o *managerOps) revokeUser(ctx context.Context, user string) error {
	_, err := o.m.RevokeUser(ctx, user)
	return err
}

// naiveSessions is the control: a table of sessions with unconditional
// saves (last write wins) and deletes.
type naiveSessions struct{ w *workerEnv }

func (o *naiveSessions) db() *sql.DB { return o.w.ledger.DB() }

func (o *naiveSessions) create(ctx context.Context, user string) (string, error) {
	id := rand.Text()
	_, err := o.db().ExecContext(ctx, `INSERT INTO proof_sessions (run, id, user, data) VALUES (?, ?, ?, '0')`, o.w.spec.Prefix, id, user)
	return id, err
}

func (o *naiveSessions) read(ctx context.Context, id string) (user, data string, err error) {
	err = o.db().QueryRowContext(ctx, `SELECT user, data FROM proof_sessions WHERE run = ? AND id = ?`, o.w.spec.Prefix, id).Scan(&user, &data)
	if errors.Is(err, sql.ErrNoRows) {
		err = session.ErrNotFound
	}
	return user, data, err
}

func (o *naiveSessions) load(ctx context.Context, id string) error {
	_, _, err := o.read(ctx, id)
	return err
}

func (o *naiveSessions) lateSave(ctx context.Context, id string, think func()) error {
	user, _, err := o.read(ctx, id)
	if err != nil {
		return err
	}
	think()
	_, err = o.db().ExecContext(ctx, `INSERT INTO proof_sessions (run, id, user, data) VALUES (?, ?, ?, '1')
		ON CONFLICT (run, id) DO UPDATE SET data = excluded.data`, o.w.spec.Prefix, id, user)
	return err
}

func (o *naiveSessions) rotate(ctx context.Context, id string) (string, error) {
	user, data, err := o.read(ctx, id)
	if err != nil {
		return "", err
	}
	nid := rand.Text()
	if _, err := o.db().ExecContext(ctx, `INSERT INTO proof_sessions (run, id, user, data) VALUES (?, ?, ?, ?)`, o.w.spec.Prefix, nid, user, data); err != nil {
		return "", err
	}
	_, err = o.db().ExecContext(ctx, `DELETE FROM proof_sessions WHERE run = ? AND id = ?`, o.w.spec.Prefix, id)
	return nid, err
}

func (o *naiveSessions) revokeUser(ctx context.Context, user string) error {
	_, err := o.db().ExecContext(ctx, `DELETE FROM proof_sessions WHERE run = ? AND user = ?`, o.w.spec.Prefix, user)
	return err
}

func sessionCheck(_ context.Context, _ *workerEnv, _ *runInfo, h *History, mode string) ModeResult {
	var m ModeResult
	var writes []Op
	for _, op := range h.Select(mode, "") {
		if op.F == "save" || op.F == "rotate" || op.F == "revoke" {
			writes = append(writes, op)
		}
	}
	m.countOps(writes)
	revoked := map[string]int64{} // user → completion of an acknowledged revocation
	for _, op := range h.Select(mode, "revoke") {
		if op.Status == OK {
			revoked[op.Key] = op.Complete
		}
	}
	var bad []string
	for _, op := range h.Select(mode, "load") {
		if op.Status != OK {
			continue
		}
		if at, ok := revoked[op.Key]; ok && op.Invoke > at {
			m.StaleAdmitted++
			bad = append(bad, op.Key)
		}
	}
	for _, op := range h.Select(mode, "save") {
		if at, ok := revoked[op.Key]; ok && op.Status == OK && op.Invoke > at {
			m.StaleAdmitted++
			bad = append(bad, op.Key)
		}
	}
	sort.Strings(bad)
	for _, u := range bad {
		m.violate("user %s: a session loaded or was saved after all the user's sessions were revoked", u)
	}
	return m
}
