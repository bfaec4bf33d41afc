package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	scsgoredis "github.com/alexedwards/scs/goredisstore"
	scsredis "github.com/alexedwards/scs/redisstore"
	scs "github.com/alexedwards/scs/v2"
	redigo "github.com/gomodule/redigo/redis"

	"github.com/tenurekit/tenure/session"
	"github.com/tenurekit/tenure/store/redisstore"
)

// SessionContenders are the contenders of BenchmarkRedisSession, each doing
// what one request does to a session kept in Redis with an idle timeout:
// load it by token and push its idle deadline forward.
//
//   - tenure: session.Manager.Load on redisstore through rueidis. One Lua
//     script call reads the record, judges both deadlines on the server's
//     TIME and sets the idle deadline to min(now + idle, absolute) only if
//     the session is still live (a conditional write: an ended session is
//     never revived).
//   - scs: alexedwards/scs v2 with its redisstore (redigo pool), Load +
//     Commit with IdleTimeout set: GET, then MULTI SET PEXPIREAT EXEC of the
//     whole re-encoded session, on the application's clock. Last write
//     wins: a logged-out session is written back (the lost logout the
//     anchor reproduces).
//   - scs-goredis: the same with scs's goredisstore (go-redis pool).
var SessionContenders = []string{"tenure", "scs", "scs-goredis"}

// Session bench settings.
const (
	sessionIdle     = 30 * time.Minute
	sessionAbsolute = 8 * time.Hour
	// SessionsPerWorker is the number of sessions each worker cycles through.
	SessionsPerWorker = 16
)

// sessionContender is one contender: how to make a session and how to load
// and refresh it.
type sessionContender struct {
	create func(ctx context.Context, user string) (string, error)
	cycle  func(ctx context.Context, token string) error

	once   sync.Once
	tokens [][]string // per worker
	err    error
}

// sessionEnvs holds the session contenders of each Env (*Env ->
// *sessionEnv), built on first use.
var sessionEnvs sync.Map

type sessionEnv struct {
	once sync.Once
	cs   *sessionContenders
	err  error
}

type sessionContenders struct {
	byName  map[string]*sessionContender
	manager *session.Manager
	pool    *redigo.Pool
}

func (r *redisClients) sessionContenders(ctx context.Context) (*sessionContenders, error) {
	st, err := redisstore.New(r.rueidis, &redisstore.Options{Prefix: "bench:tenure-session:"})
	if err != nil {
		return nil, err
	}
	if err := st.Check(ctx); err != nil {
		return nil, fmt.Errorf("redisstore check: %w", err)
	}
	m, err := session.New(st.Sessions(), &session.Options{IdleTimeout: sessionIdle, AbsoluteTimeout: sessionAbsolute})
	if err != nil {
		return nil, err
	}
	cs := &sessionContenders{byName: map[string]*sessionContender{}, manager: m}
	cs.byName["tenure"] = &sessionContender{
		create: func(ctx context.Context, user string) (string, error) {
			tok, _, err := m.Create(ctx, user, map[string]string{"user": user, "role": "member"})
			return tok.Reveal(), err
		},
		cycle: func(ctx context.Context, token string) error {
			tok, err := session.ParseToken(token)
			if err != nil {
				return err
			}
			_, err = m.Load(ctx, tok)
			return err
		},
	}

	addr := r.addr
	pool := &redigo.Pool{
		MaxIdle:   MaxWorkers,
		MaxActive: MaxWorkers,
		Wait:      true,
		Dial:      func() (redigo.Conn, error) { return redigo.Dial("tcp", addr) },
	}
	// Open every connection now, not in the first measured run.
	conns := make([]redigo.Conn, MaxWorkers)
	for i := range conns {
		conns[i] = pool.Get()
		if _, err := conns[i].Do("PING"); err != nil {
			return nil, fmt.Errorf("redigo: %w", err)
		}
	}
	for _, c := range conns {
		c.Close()
	}
	cs.pool = pool
	cs.byName["scs"] = scsContender(scsredis.NewWithPrefix(pool, "bench:scs:"))
	cs.byName["scs-goredis"] = scsContender(scsgoredis.NewWithPrefix(r.goredis, "bench:scs-goredis:"))
	return cs, nil
}

func scsContender(store scs.Store) *sessionContender {
	sm := scs.New()
	sm.Store = store
	sm.IdleTimeout = sessionIdle
	sm.Lifetime = sessionAbsolute
	return &sessionContender{
		create: func(ctx context.Context, user string) (string, error) {
			ctx, err := sm.Load(ctx, "")
			if err != nil {
				return "", err
			}
			sm.Put(ctx, "user", user)
			sm.Put(ctx, "role", "member")
			tok, _, err := sm.Commit(ctx)
			return tok, err
		},
		cycle: func(ctx context.Context, token string) error {
			ctx, err := sm.Load(ctx, token)
			if err != nil {
				return err
			}
			if sm.GetString(ctx, "user") == "" {
				return errors.New("scs: the session was not found")
			}
			_, _, err = sm.Commit(ctx) // what LoadAndSave does with IdleTimeout set
			return err
		},
	}
}

// sessionCycle returns the cycle of contender name: each worker loads and
// refreshes its own sessions in turn.
func (e *Env) sessionCycle(name string) (newWorker, error) {
	r, err := e.Redis()
	if err != nil {
		return nil, err
	}
	v, _ := sessionEnvs.LoadOrStore(e, &sessionEnv{})
	se := v.(*sessionEnv)
	se.once.Do(func() { se.cs, se.err = r.sessionContenders(context.Background()) })
	if se.err != nil {
		return nil, se.err
	}
	c, ok := se.cs.byName[name]
	if !ok {
		return nil, fmt.Errorf("bench: unknown session contender %q", name)
	}
	c.once.Do(func() {
		ctx := context.Background()
		c.tokens = make([][]string, MaxWorkers)
		for w := range c.tokens {
			for i := range SessionsPerWorker {
				tok, err := c.create(ctx, fmt.Sprintf("user-%d-%d", w, i))
				if err != nil {
					c.err = fmt.Errorf("create a %s session: %w", name, err)
					return
				}
				c.tokens[w] = append(c.tokens[w], tok)
			}
		}
	})
	if c.err != nil {
		return nil, c.err
	}
	return func(w int) cycleFunc {
		toks := c.tokens[w]
		i := 0
		return func(ctx context.Context, _ string) error {
			i++
			return c.cycle(ctx, toks[i%len(toks)])
		}
	}, nil
}

// SessionCycle measures load+refresh cycles of contender on one Redis with
// workers concurrent workers. It skips b when redis-server is not
// installed.
func (e *Env) SessionCycle(b *testing.B, contender string, workers int) {
	nw, err := e.sessionCycle(contender)
	if errors.Is(err, ErrSkipped) {
		b.Skip(err)
	}
	if err != nil {
		b.Fatal(err)
	}
	r, _ := e.Redis()
	runCycles(b, "redis-session:"+contender, workers, nw, r.cpu)
}
