package lab

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tenurekit/tenure/ratelimit"

	"github.com/tenurekit/tenure/ratelimit/driver"
)

func init() {
	register(
		Experiment{
			Name:     "fixed-window-script",
			Shows:    "A fixed-window limit admits exactly its quota per window, judged by the store's clock.",
			Want:     "allowed=1,1,1,0,0",
			Supports: hasLimits,
			Run:      fixedWindowScript,
		},
		Experiment{
			Name:     "fixed-window-concurrent",
			Shows:    "Concurrent callers never exceed a fixed-window quota, and the counter always carries an expiry.",
			Want:     "fixedWindowConcurrentCalls=20 accepted=5 rejected=15 ttlPresent=true",
			Supports: hasLimits,
			Run:      fixedWindowConcurrent,
		},
	)
}

// limitStore is a store's rate limit view and its inspection of a key's
// time to live.
type limitStore struct {
	s   ratelimit.Store
	ttl func(ctx context.Context, k driver.StateKey) (time.Duration, bool, error)
}

// limitsOf returns env's rate limit view; etcd has none (a Raft write per
// request is the wrong tool for rate limits).
func limitsOf(env *Env) (limitStore, bool) {
	switch {
	case env.Mem != nil:
		return limitStore{env.Mem.Limits(), env.Mem.LimitTTL}, true
	case env.SQLite != nil:
		return limitStore{env.SQLite.Limits(), env.SQLite.LimitTTL}, true
	case env.PG != nil:
		return limitStore{env.PG.Limits(), env.PG.LimitTTL}, true
	case env.Redis != nil:
		return limitStore{env.Redis.Limits(), env.Redis.LimitTTL}, true
	}
	return limitStore{}, false
}

func hasLimits(env *Env) bool { _, ok := limitsOf(env); return ok }

// limitName turns a run's key prefix into a limit name (letters, digits,
// '.', '_', '-').
func limitName(env *Env, name string) string {
	n := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return '-'
	}, env.Prefix+name)
	if len(n) > ratelimit.MaxNameLen {
		n = n[len(n)-ratelimit.MaxNameLen:]
	}
	return n
}

// fixedWindowScript is the classic fixed-window Lua script, `--eval
// fixed-window.lua rate:{user7}:article , 3 10000`, five times: a window of
// 10 s that starts with the first request, 3 admitted. Each call's reply is
// the script's {allowed, count, remaining ms of the window}; the line shows
// the allowed column, and the run checks that the third value is the time
// left in the window that the first request opened (denied requests do
// not extend it).
func fixedWindowScript(ctx context.Context, env *Env) ([]KV, []KV, error) {
	ls, _ := limitsOf(env)
	const window = 10 * time.Second
	l, err := ratelimit.New(ls.s, ratelimit.FixedWindow, ratelimit.Limit{Name: limitName(env, "fixed-window"), Rate: 3, Period: window}, nil)
	if err != nil {
		return nil, nil, err
	}
	const key = "rate:{user7}:article"
	var (
		allowed, replies []string
		first            time.Time
	)
	for i := range 5 {
		d, err := l.Allow(ctx, key)
		if err != nil {
			return nil, nil, err
		}
		if i == 0 {
			first = d.At
		}
		ms := (d.ResetAfter + time.Millisecond - 1) / time.Millisecond
		a := "0"
		if d.Allowed {
			a = "1"
		}
		allowed = append(allowed, a)
		replies = append(replies, fmt.Sprintf("{%s,%d,%d}", a, 3-d.Remaining, ms))
		// The third value: what is left of the window the first request
		// opened, on the store's clock.
		left := first.Add(window).Sub(d.At)
		if d.ResetAfter != left || d.ResetAfter <= 0 || d.ResetAfter > window {
			return nil, nil, fmt.Errorf("call %d: %v left in the window, want %v (the window started with the first request)", i+1, d.ResetAfter, left)
		}
	}
	notes := []KV{{"replies", strings.Join(replies, ",")}}
	if k, err := l.StateKey(key); err == nil {
		if ttl, ok, err := ls.ttl(ctx, k); err == nil && ok {
			notes = append(notes, KV{"ttlMs", strconv.FormatInt(ttl.Milliseconds(), 10)})
		}
	}
	return []KV{{"allowed", strings.Join(allowed, ",")}}, notes, nil
}

// fixedWindowConcurrent is the concurrent counter test: 20 callers
// at once against a limit of 5 per 30 s window; exactly 5 pass, and the
// state the store keeps has a TTL.
func fixedWindowConcurrent(ctx context.Context, env *Env) ([]KV, []KV, error) {
	ls, _ := limitsOf(env)
	l, err := ratelimit.New(ls.s, ratelimit.FixedWindow, ratelimit.Limit{Name: limitName(env, "fixed-window-concurrent"), Rate: 5, Period: 30 * time.Second}, nil)
	if err != nil {
		return nil, nil, err
	}
	const calls = 20
	key := "concurrent"
	var (
		wg                 sync.WaitGroup
		start              = make(chan struct{})
		mu                 sync.Mutex
		accepted, rejected int
		errs               []error
	)
	for range calls {
		wg.Go(func() {
			<-start
			d, err := l.Allow(ctx, key)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				errs = append(errs, err)
			case d.Allowed:
				accepted++
			default:
				rejected++
			}
		})
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	k, err := l.StateKey(key)
	if err != nil {
		return nil, nil, err
	}
	ttl, present, err := ls.ttl(ctx, k)
	if err != nil {
		return nil, nil, err
	}
	// A store may keep the counter up to the millisecond after the window
	// ends (Redis expires keys on whole milliseconds), never longer.
	ttlPresent := present && ttl > 0 && ttl <= 30*time.Second+time.Millisecond
	return []KV{
			{"fixedWindowConcurrentCalls", strconv.Itoa(calls)},
			{"accepted", strconv.Itoa(accepted)},
			{"rejected", strconv.Itoa(rejected)},
			{"ttlPresent", strconv.FormatBool(ttlPresent)},
		}, []KV{
			{"ttlMs", strconv.FormatInt(ttl.Milliseconds(), 10)},
		}, nil
}
