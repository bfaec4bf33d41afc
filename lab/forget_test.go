package lab_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lab"
	"github.com/tenurekit/tenure/lease"
)

// testForgetEnded: ForgetEnded drops an ended lease's record (its fence
// included) and keeps a held one; the next grant of the forgotten key
// still gets a fence above the one granted before.
func testForgetEnded(t *testing.T, spec string) {
	ctx := t.Context()
	envs, err := lab.OpenPrefix(ctx, spec, "forget-"+strings.ReplaceAll(t.Name(), "/", "-")+"/")
	if err != nil {
		t.Fatal(err)
	}
	e := envs[0]
	defer e.Close()
	lk, err := lease.New(e.Leases, nil)
	if err != nil {
		t.Fatal(err)
	}
	ended, held := e.Key("ended"), e.Key("held")
	l, err := lk.TryAcquire(ctx, ended, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	before := l.Fence()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	h, err := lk.TryAcquire(ctx, held, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx)
	// The ended lease's fence is floored at the store's clock in
	// microseconds; its record goes once the clock has passed it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := e.ForgetEnded(ctx, []string{ended, held})
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if n != 0 || time.Now().After(deadline) {
			t.Fatalf("ForgetEnded = %d, want 1 (the ended lease only)", n)
		}
	}
	if info, err := e.Leases.Inspect(ctx, ended); err != nil || info.Fence != 0 || info.Held {
		t.Fatalf("the ended lease after ForgetEnded: %+v, %v; want no record", info, err)
	}
	if info, err := e.Leases.Inspect(ctx, held); err != nil || !info.Held || info.Fence != h.Fence() {
		t.Fatalf("the held lease after ForgetEnded: %+v, %v; want held at fence %d", info, err, h.Fence())
	}
	again, err := lk.TryAcquire(ctx, ended, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Release(ctx)
	if again.Fence() <= before {
		t.Fatalf("fence %d after the record was lost, not above %d", again.Fence(), before)
	}
}

func TestForgetEnded(t *testing.T) {
	for _, c := range []struct {
		name string
		spec func(t *testing.T) string
	}{
		{"memory", func(*testing.T) string { return "memory" }},
		{"sqlite", func(t *testing.T) string { return "sqlite:" + t.TempDir() + "/tenure.db" }},
		{"redis", func(t *testing.T) string { return "redis://" + testenv.SharedRedis(t).Addr() }},
		{"redis-cluster", func(t *testing.T) string {
			a := testenv.SharedRedisCluster(t).Addrs()
			return fmt.Sprintf("redis://%s?addr=%s&addr=%s", a[0], a[1], a[2])
		}},
		{"postgres", func(t *testing.T) string { return testenv.SharedPostgres(t).NewDatabase(t) }},
	} {
		t.Run(c.name, func(t *testing.T) { testForgetEnded(t, c.spec(t)) })
	}
}
