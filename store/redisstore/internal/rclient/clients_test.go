package rclient

import (
	"context"
	"sync"
	"testing"

	"github.com/redis/rueidis"
	"github.com/tenurekit/tenure/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func newRueidis(t *testing.T, addr string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableRetry: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// A call is lone only while no other call of the adapter is in flight.
func TestRueidisLoneCalls(t *testing.T) {
	c := Rueidis(nil).(*ruClient)
	if !c.enter() {
		t.Fatal("first call is not lone")
	}
	if c.enter() {
		t.Fatal("a call overlapping another is lone")
	}
	c.leave()
	c.leave()
	if !c.enter() {
		t.Fatal("a call after the others ended is not lone")
	}
	c.leave()
}

// Scripts run on both paths (lone calls on a pooled connection, concurrent
// ones pipelined), and EVALSHA falls back to EVAL after the server's script
// cache was flushed, for scripts that write and read-only ones alike.
func TestRueidisEvalBothPaths(t *testing.T) {
	ctx := context.Background()
	srv := testenv.Redis(t, nil)
	rc := newRueidis(t, srv.Addr())
	c := Rueidis(rc)
	incr := NewScript("return redis.call('INCRBY', KEYS[1], ARGV[1])")
	get := NewScriptReadOnly("return redis.call('GET', KEYS[1])")
	if err := rc.Do(ctx, rc.B().ScriptFlush().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	// Lone: EVALSHA answers NOSCRIPT, EVAL runs it once.
	if n, err := incr.Exec(ctx, c, []string{"{t}:n"}, []string{"2"}).AsInt64(); err != nil || n != 2 {
		t.Fatalf("lone incr after SCRIPT FLUSH: %d, %v", n, err)
	}
	if s, err := get.Exec(ctx, c, []string{"{t}:n"}, nil).ToString(); err != nil || s != "2" {
		t.Fatalf("lone read-only script after SCRIPT FLUSH: %q, %v", s, err)
	}
	if err := rc.Do(ctx, rc.B().ScriptFlush().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	// Concurrent: most calls overlap, so they are pipelined.
	const workers, each = 8, 50
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for range each {
				if err := incr.Exec(ctx, c, []string{"{t}:n"}, []string{"1"}).Error(); err != nil {
					errs <- err
					return
				}
				if err := get.Exec(ctx, c, []string{"{t}:n"}, nil).Error(); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got, err := rc.Do(ctx, rc.B().Get().Key("{t}:n").Build()).AsInt64()
	if err != nil || got != 2+workers*each {
		t.Fatalf("after concurrent scripts: %d, %v; want %d (every call applied once)", got, err, 2+workers*each)
	}
	// A lone command that is not a script, and a server error reply.
	if err := c.Do(ctx, Cmd{Name: "SET", Keys: []string{"{t}:s"}, Args: []string{"v"}}).Error(); err != nil {
		t.Fatal(err)
	}
	if _, ok := ServerError(c.Do(ctx, Cmd{Name: "INCR", Keys: []string{"{t}:s"}}).Error()); !ok {
		t.Fatal("INCR of a string: no server error")
	}
}
