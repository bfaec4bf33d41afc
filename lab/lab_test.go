package lab_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lab"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// runAll runs every experiment the store supports and checks each line
// against what it must show.
func runAll(t *testing.T, spec string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	envs, err := lab.Open(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, e := range envs {
			if err := e.Close(); err != nil {
				t.Errorf("close %s: %v", e.Store, err)
			}
		}
	}()
	var out bytes.Buffer
	results, err := lab.Run(ctx, envs, &lab.Options{Out: &out})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, env := range envs {
		for _, e := range lab.Experiments() {
			if e.Supports == nil || e.Supports(env) {
				want++
			}
		}
	}
	if len(results) != want {
		t.Fatalf("%d results, want %d (every supported experiment on every store)", len(results), want)
	}
	for _, r := range results {
		if !r.OK || r.Line != r.Want {
			t.Errorf("%s on %s: %q (error %q), want %q", r.Experiment, r.Store, r.Line, r.Error, r.Want)
		}
		if !strings.Contains(out.String(), r.Line) {
			t.Errorf("report lacks %q", r.Line)
		}
	}
}

func TestLabDefault(t *testing.T) {
	t.Parallel()
	runAll(t, "")
}

func TestLabRedis(t *testing.T) {
	t.Parallel()
	runAll(t, "redis://"+testenv.Redis(t, nil).Addr())
}

func TestLabRedisCluster(t *testing.T) {
	t.Parallel()
	addrs := testenv.SharedRedisCluster(t).Addrs()
	runAll(t, fmt.Sprintf("redis://%s?addr=%s&addr=%s", addrs[0], addrs[1], addrs[2]))
}

func TestLabPostgres(t *testing.T) {
	t.Parallel()
	runAll(t, testenv.SharedPostgres(t).NewDatabase(t))
}

func TestLabEtcd(t *testing.T) {
	t.Parallel()
	eps := testenv.SharedEtcd(t).Endpoints()
	runAll(t, "etcd://"+strings.TrimPrefix(eps[0], "http://"))
}

func TestLabJSONAndOnly(t *testing.T) {
	ctx := t.Context()
	envs, err := lab.Open(ctx, "memory")
	if err != nil {
		t.Fatal(err)
	}
	defer envs[0].Close()
	var out bytes.Buffer
	results, err := lab.Run(ctx, envs, &lab.Options{Only: []string{"lua-release"}, JSON: true, Out: &out})
	if err != nil || len(results) != 1 || !results[0].OK {
		t.Fatalf("results %+v, err %v", results, err)
	}
	if !strings.HasPrefix(out.String(), `{"store":"memory","experiment":"lua-release"`) {
		t.Fatalf("JSON output: %s", out.String())
	}
	if _, err := lab.Run(ctx, envs, &lab.Options{Only: []string{"no-such"}}); err == nil {
		t.Fatal("unknown experiment accepted")
	}
}

func TestOpenRejectsUnknownStore(t *testing.T) {
	for _, spec := range []string{"mysql://x", "etcd://", "sqlite"} {
		if envs, err := lab.Open(t.Context(), spec); err == nil {
			for _, e := range envs {
				e.Close()
			}
			t.Errorf("Open(%q) succeeded", spec)
		}
	}
}
