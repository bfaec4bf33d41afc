package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tenurekit/tenure/session"
)

func init() {
	register(
		Experiment{
			Name:     "session-late-save",
			Shows:    "A late save after logout cannot bring the session back: revoked stays revoked.",
			Want:     "lateSaveRows=0 revoked=true",
			Supports: hasSessions,
			Run:      sessionLateSave,
		},
		Experiment{
			Name:     "session-absolute-deadline",
			Shows:    "Activity refreshes the idle deadline but never extends a session past its absolute deadline.",
			Want:     "idleRefreshPastAbsolute=0",
			Supports: hasSessions,
			Run:      sessionAbsoluteDeadline,
		},
		Experiment{
			Name:     "session-expiry",
			Shows:    "Reads cannot extend the absolute expiry, a revoked session is gone, and the token never reaches the logs.",
			Want:     "activeReadsCannotExtendAbsoluteExpiry=true revokedSession=absent tokenNotLogged=true",
			Supports: hasSessions,
			Run:      sessionExpiry,
		},
	)
}

// hasSessions: every store but etcd (sessions on etcd are optional and not
// built).
func hasSessions(env *Env) bool { return sessionStore(env) != nil }

func sessionStore(env *Env) session.Store {
	switch {
	case env.Mem != nil:
		return env.Mem.Sessions()
	case env.SQLite != nil:
		return env.SQLite.Sessions()
	case env.PG != nil:
		return env.PG.Sessions()
	case env.Redis != nil:
		return env.Redis.Sessions()
	}
	return nil
}

// sessionLateSave: request A reads the session (version 1), request B logs
// out, A saves the whole session at the end: the save updates nothing and
// the session stays revoked.
func sessionLateSave(ctx context.Context, env *Env) ([]KV, []KV, error) {
	m, err := session.New(sessionStore(env), &session.Options{IdleTimeout: 5 * time.Minute, AbsoluteTimeout: time.Hour})
	if err != nil {
		return nil, nil, err
	}
	user := env.Key("session-late-save")
	tok, _, err := m.Create(ctx, user, map[string]string{"role": "user"})
	if err != nil {
		return nil, nil, err
	}
	a, err := m.Load(ctx, tok) // A reads
	if err != nil {
		return nil, nil, err
	}
	readVersion := a.Version()
	if err := m.Revoke(ctx, a.ID()); err != nil { // B logs out
		return nil, nil, err
	}
	a.Set("role", "admin")
	rows := 0
	switch err := m.Save(ctx, a); { // A's late save
	case err == nil:
		rows = 1
	case !errors.Is(err, session.ErrNotFound):
		return nil, nil, err
	}
	// A read-only request's late idle refresh does not revive it either.
	touchRows := 0
	switch err := m.Touch(ctx, a); {
	case err == nil:
		touchRows = 1
	case !errors.Is(err, session.ErrNotFound):
		return nil, nil, err
	}
	revoked, err := sessionAbsent(ctx, m, tok, user)
	if err != nil {
		return nil, nil, err
	}
	return []KV{{"lateSaveRows", strconv.Itoa(rows)}, {"revoked", strconv.FormatBool(revoked)}},
		[]KV{{"readVersion", strconv.FormatUint(readVersion, 10)}, {"lateTouchRows", strconv.Itoa(touchRows)}}, nil
}

// sessionAbsent reports whether tok names no session and its user lists
// none.
func sessionAbsent(ctx context.Context, m *session.Manager, tok session.Token, user string) (bool, error) {
	_, err := m.Load(ctx, tok)
	if err != nil && !errors.Is(err, session.ErrNotFound) {
		return false, err
	}
	list, lerr := m.List(ctx, user)
	if lerr != nil {
		return false, lerr
	}
	return err != nil && len(list) == 0, nil
}

// sessionAbsoluteDeadline sets the stored absolute deadline in the past by
// hand, then runs the idle refresh: it updates nothing.
func sessionAbsoluteDeadline(ctx context.Context, env *Env) ([]KV, []KV, error) {
	m, err := session.New(sessionStore(env), &session.Options{IdleTimeout: 5 * time.Minute, AbsoluteTimeout: time.Hour})
	if err != nil {
		return nil, nil, err
	}
	user := env.Key("session-absolute-deadline")
	tok, s, err := m.Create(ctx, user, nil)
	if err != nil {
		return nil, nil, err
	}
	how, err := setAbsolutePast(ctx, env, s)
	if err != nil {
		return nil, nil, fmt.Errorf("set the absolute deadline in the past: %w", err)
	}
	rows := 0
	switch err := m.Touch(ctx, s); {
	case err == nil:
		rows = 1
	case !errors.Is(err, session.ErrNotFound):
		return nil, nil, err
	}
	_, loadErr := m.Load(ctx, tok)
	if loadErr != nil && !errors.Is(loadErr, session.ErrNotFound) {
		return nil, nil, loadErr
	}
	return []KV{{"idleRefreshPastAbsolute", strconv.Itoa(rows)}},
		[]KV{{"edit", how}, {"loadAfter", strconv.FormatBool(loadErr == nil)}}, nil
}

// setAbsolutePast writes an absolute deadline one second before the
// store's clock into the record, with the store's own SQL or commands.
func setAbsolutePast(ctx context.Context, env *Env, s *session.Session) (string, error) {
	id := s.ID()
	switch {
	case env.Mem != nil:
		past := time.Now().Add(-time.Second)
		if !env.Mem.SetSessionDeadlines(id, s.IdleUntil(), past) {
			return "", errors.New("no such record")
		}
		return "hook", nil
	case env.SQLite != nil:
		res, err := env.SQLite.DB().ExecContext(ctx, `UPDATE tenure_sessions SET absolute_us = ? WHERE id = ?`,
			time.Now().Add(-time.Second).UnixMicro(), string(id))
		return "sql", oneRow(res, err)
	case env.PG != nil:
		r, ok := env.Resource.(*pgResource)
		if !ok {
			return "", errors.New("no pool")
		}
		tag, err := r.pool.Exec(ctx, `UPDATE `+env.PG.Schema()+`.sessions
			SET absolute_until = clock_timestamp() - interval '1 second' WHERE id = $1`, string(id))
		if err == nil && tag.RowsAffected() != 1 {
			err = fmt.Errorf("%d rows", tag.RowsAffected())
		}
		return "sql", err
	case env.Redis != nil:
		r, ok := env.Resource.(*redisResource)
		if !ok {
			return "", errors.New("no client")
		}
		key := env.Redis.SessionKey(id)
		t, err := r.c.Do(ctx, r.c.B().Time().Build()).AsStrSlice()
		if err != nil || len(t) != 2 {
			return "", fmt.Errorf("TIME: %v", err)
		}
		sec, _ := strconv.ParseInt(t[0], 10, 64)
		n, err := r.c.Do(ctx, r.c.B().Hset().Key(key).FieldValue().
			FieldValue("a", strconv.FormatInt(sec*1000-1000, 10)).Build()).AsInt64()
		if err == nil && n != 0 {
			err = errors.New("the record had no absolute deadline")
		}
		return "hset", err
	}
	return "", errors.New("unsupported store")
}

type sqlResult interface{ RowsAffected() (int64, error) }

func oneRow(res sqlResult, err error) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err == nil && n != 1 {
		err = fmt.Errorf("%d rows", n)
	}
	return err
}

// lockedBuffer is a log sink safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// sessionExpiry: idle 5 s, absolute 1.5 s (both twice as long again on a
// machine too busy for two reads in that time), a read every 50 ms. The reads
// keep refreshing the idle deadline, which is capped at the absolute one,
// so the session still ends at 1.5 s. Then a new session is revoked and is
// gone at once; and no log line holds a token.
func sessionExpiry(ctx context.Context, env *Env) ([]KV, []KV, error) {
	var logs lockedBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var (
		m             *session.Manager
		tok           session.Token
		loads         int
		capped        bool
		elapsed, idle time.Duration
	)
	// A machine so busy that fewer than two loads fit before the absolute
	// deadline shows nothing about activity: the experiment runs again
	// with both deadlines twice as long (at most three times).
	for absolute := 1500 * time.Millisecond; ; absolute *= 2 {
		idle = absolute * 10 / 3
		var err error
		m, err = session.New(sessionStore(env), &session.Options{IdleTimeout: idle, AbsoluteTimeout: absolute, Logger: logger})
		if err != nil {
			return nil, nil, err
		}
		var s *session.Session
		tok, s, err = m.Create(ctx, env.Key("session-expiry"), nil)
		if err != nil {
			return nil, nil, err
		}
		// What an application might log by mistake.
		logger.Info("lab: session issued", "token", tok, "session", s.ID().Short())
		fmt.Fprintf(&logs, "lab: printf %v %s %q %+v\n", tok, tok, tok, tok)

		start := time.Now()
		loads, capped = 0, true
		for {
			cur, err := m.Load(ctx, tok)
			elapsed = time.Since(start)
			if errors.Is(err, session.ErrNotFound) {
				break
			}
			if err != nil {
				return nil, nil, err
			}
			loads++
			if cur.IdleUntil().After(cur.AbsoluteUntil()) || !cur.AbsoluteUntil().Equal(s.AbsoluteUntil()) {
				capped = false
			}
			if elapsed > idle {
				break // activity extended the session: the experiment fails
			}
			select {
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
		if loads >= 2 || absolute >= 6*time.Second {
			break
		}
	}
	// Every load refreshes the idle deadline (idle ahead), so two loads are
	// activity enough: each must have been capped at the absolute deadline,
	// and the session must end at it, not at the idle one. A busy machine
	// makes fewer loads in that time; the claim is the same.
	extendedNot := capped && loads >= 2 && elapsed < idle

	user2 := env.Key("session-expiry-revoke")
	tok2, s2, err := m.Create(ctx, user2, nil)
	if err != nil {
		return nil, nil, err
	}
	logger.Info("lab: second session", "token", tok2)
	if err := m.Revoke(ctx, s2.ID()); err != nil {
		return nil, nil, err
	}
	absent, err := sessionAbsent(ctx, m, tok2, user2)
	if err != nil {
		return nil, nil, err
	}
	revoked := "present"
	if absent {
		revoked = "absent"
	}
	out := logs.String()
	notLogged := strings.Contains(out, "session created") && strings.Contains(out, "REDACTED") &&
		!strings.Contains(out, tok.Reveal()) && !strings.Contains(out, tok2.Reveal())
	return []KV{
			{"activeReadsCannotExtendAbsoluteExpiry", strconv.FormatBool(extendedNot)},
			{"revokedSession", revoked},
			{"tokenNotLogged", strconv.FormatBool(notLogged)},
		}, []KV{
			{"loads", strconv.Itoa(loads)},
			{"endedAfter", elapsed.Round(10 * time.Millisecond).String()},
		}, nil
}
