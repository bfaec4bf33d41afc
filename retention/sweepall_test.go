package retention_test

import (
	"context"
	"errors"
	"testing"

	"github.com/tenurekit/tenure/retention"
)

// passes is a Sweeper that deletes one lease row per call and has more to
// delete for its first left calls; failAt makes that call fail.
type passes struct{ calls, left, failAt int }

func (p *passes) Sweep(context.Context, retention.Options) (retention.Result, error) {
	p.calls++
	var r retention.Result
	r.Add(retention.Leases, 1)
	if p.calls == p.failAt {
		return r, errors.New("store unreachable")
	}
	r.More = p.calls <= p.left
	return r, nil
}

func TestSweepAll(t *testing.T) {
	ctx := t.Context()
	p := &passes{left: 3}
	r, err := retention.SweepAll(ctx, p, retention.Options{}, 0)
	if err != nil || p.calls != 4 || r.Deleted[retention.Leases] != 4 || r.More {
		t.Fatalf("SweepAll = %+v, %v after %d calls; want 4 rows in 4 calls, nothing more", r, err, p.calls)
	}
	p = &passes{left: 10}
	if r, err := retention.SweepAll(ctx, p, retention.Options{}, 2); err != nil || p.calls != 2 || !r.More || r.Total() != 2 {
		t.Fatalf("SweepAll bounded to 2 passes = %+v, %v after %d calls; want 2 calls and More", r, err, p.calls)
	}
	p = &passes{left: 10, failAt: 2}
	if r, err := retention.SweepAll(ctx, p, retention.Options{}, 0); err == nil || p.calls != 2 || r.Total() != 2 {
		t.Fatalf("SweepAll with a failing pass = %+v, %v after %d calls; want the error after 2 calls, their rows counted", r, err, p.calls)
	}
}
