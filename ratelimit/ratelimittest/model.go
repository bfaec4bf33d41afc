package ratelimittest

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/store/memstore"
)

// opKind is what one observed call did.
type opKind int

const (
	opAllow opKind = iota
	opPeek
	opReset
)

func (k opKind) String() string {
	return [...]string{"AllowN", "Peek", "Reset"}[k]
}

// obs is one call made on the store under test and what it returned.
type obs struct {
	kind opKind
	keys []string // one per limit of the subject
	n    int
	ds   []ratelimit.Decision // one per limit (none for Reset)
}

func (o obs) at() time.Time {
	if len(o.ds) == 0 {
		return time.Time{}
	}
	return o.ds[0].At
}

func (o obs) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v(%q, %d)", o.kind, o.keys, o.n)
	for _, d := range o.ds {
		b.WriteString(" -> " + fmtDecision(d))
	}
	return b.String()
}

func fmtDecision(d ratelimit.Decision) string {
	return fmt.Sprintf("{allowed=%v remaining=%d retry=%v reset=%v at=%d}", d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter, d.At.UnixMicro())
}

// subject is what the calls go to: one limiter or a group.
type subject struct {
	lim *ratelimit.Limiter
	grp *ratelimit.Group
}

func (s subject) do(ctx context.Context, kind opKind, keys []string, n int) ([]ratelimit.Decision, error) {
	switch {
	case s.lim != nil && kind == opAllow:
		d, err := s.lim.AllowN(ctx, keys[0], n)
		return []ratelimit.Decision{d}, err
	case s.lim != nil && kind == opPeek:
		d, err := s.lim.Peek(ctx, keys[0], n)
		return []ratelimit.Decision{d}, err
	case s.lim != nil:
		return nil, s.lim.Reset(ctx, keys[0])
	case kind == opAllow:
		_, ds, err := s.grp.AllowN(ctx, keys, n)
		return ds, err
	case kind == opPeek:
		_, ds, err := s.grp.Peek(ctx, keys, n)
		return ds, err
	}
	return nil, s.grp.Reset(ctx, keys)
}

// run makes a call and records it.
func (s subject) run(ctx context.Context, kind opKind, keys []string, n int) (obs, error) {
	ds, err := s.do(ctx, kind, keys, n)
	return obs{kind: kind, keys: keys, n: n, ds: ds}, err
}

// spec describes how to build the same subject on another store.
type spec struct {
	group string // "" for a single limiter
	algs  []ratelimit.Algorithm
	lims  []ratelimit.Limit
}

func (sp spec) build(s ratelimit.Store) (subject, error) {
	ls := make([]*ratelimit.Limiter, len(sp.algs))
	for i := range sp.algs {
		l, err := ratelimit.New(s, sp.algs[i], sp.lims[i], nil)
		if err != nil {
			return subject{}, err
		}
		ls[i] = l
	}
	if sp.group == "" {
		return subject{lim: ls[0]}, nil
	}
	g, err := ratelimit.NewGroup(sp.group, ls...)
	return subject{grp: g}, err
}

// model is memstore on a clock the replay sets to each decision's time.
type model struct {
	clock *Clock
	sub   subject
}

func newModel(sp spec) (*model, error) {
	c := NewClock(time.Unix(0, 0))
	ms, err := memstore.New(&memstore.Options{Clock: c.Now})
	if err != nil {
		return nil, err
	}
	sub, err := sp.build(ms.Limits())
	if err != nil {
		return nil, err
	}
	return &model{clock: c, sub: sub}, nil
}

// apply replays o on the model at o's time and reports how the model's
// decisions differ from the observed ones ("" when they agree).
func (m *model) apply(o obs) string {
	if o.kind != opReset {
		m.clock.Set(o.at())
	}
	ds, err := m.sub.do(context.Background(), o.kind, o.keys, o.n)
	if err != nil {
		return fmt.Sprintf("model: %v", err)
	}
	if len(ds) != len(o.ds) {
		return fmt.Sprintf("model gave %d decisions, the store %d", len(ds), len(o.ds))
	}
	for i := range ds {
		if diff := diffDecision(o.ds[i], ds[i]); diff != "" {
			return fmt.Sprintf("limit %d: %s", i, diff)
		}
	}
	return ""
}

// diffDecision compares a store's decision with the model's.
func diffDecision(got, want ratelimit.Decision) string {
	if got.Allowed != want.Allowed || got.Remaining != want.Remaining || got.RetryAfter != want.RetryAfter ||
		got.ResetAfter != want.ResetAfter || !got.At.Equal(want.At) || got.Limit != want.Limit || got.Algorithm != want.Algorithm {
		return fmt.Sprintf("store %s, model %s", fmtDecision(got), fmtDecision(want))
	}
	return ""
}

// maxTie is the largest number of decisions at one store instant whose
// orders the replay tries.
const maxTie = 5

// replay checks observed calls against the model, in the order of the
// store's decision times. Calls the store decided at the same microsecond
// are tried in every order (up to maxTie of them): the store applied them
// in one of those orders.
func replay(t testing.TB, sp spec, calls []obs) {
	t.Helper()
	calls = slices.Clone(calls)
	slices.SortStableFunc(calls, func(a, b obs) int { return a.at().Compare(b.at()) })
	m, err := newModel(sp)
	if err != nil {
		t.Fatal(err)
	}
	var applied []obs
	for i := 0; i < len(calls); {
		j := i + 1
		for j < len(calls) && calls[j].kind != opReset && calls[i].kind != opReset && calls[j].at().Equal(calls[i].at()) {
			j++
		}
		tie := calls[i:j]
		if len(tie) == 1 {
			if diff := m.apply(tie[0]); diff != "" {
				t.Fatalf("call %d of %d: %v\n  differs from the model: %s\n%s", i+1, len(calls), tie[0], diff, history(applied))
			}
			applied = append(applied, tie[0])
			i = j
			continue
		}
		if len(tie) > maxTie {
			t.Fatalf("%d decisions at the same store microsecond %d: cannot replay them", len(tie), tie[0].at().UnixMicro())
		}
		var found bool
		for _, perm := range permutations(len(tie)) {
			m2, err := newModel(sp)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range applied {
				m2.apply(o)
			}
			ok := true
			for _, k := range perm {
				if m2.apply(tie[k]) != "" {
					ok = false
					break
				}
			}
			if ok {
				m = m2
				for _, k := range perm {
					applied = append(applied, tie[k])
				}
				found = true
				break
			}
		}
		if !found {
			var b strings.Builder
			for _, o := range tie {
				b.WriteString("\n  " + o.String())
			}
			t.Fatalf("no order of the %d calls decided at store microsecond %d agrees with the model:%s\n%s", len(tie), tie[0].at().UnixMicro(), b.String(), history(applied))
		}
		i = j
	}
}

func history(applied []obs) string {
	var b strings.Builder
	b.WriteString("calls before it:")
	from := max(0, len(applied)-12)
	if from > 0 {
		fmt.Fprintf(&b, "\n  ... %d more", from)
	}
	for _, o := range applied[from:] {
		b.WriteString("\n  " + o.String())
	}
	return b.String()
}

// permutations returns every order of 0..n-1.
func permutations(n int) [][]int {
	if n == 0 {
		return [][]int{{}}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for i := 0; i <= len(p); i++ {
			q := append(append(append([]int{}, p[:i]...), n-1), p[i:]...)
			out = append(out, q)
		}
	}
	slices.SortFunc(out, func(a, b []int) int {
		for i := range a {
			if c := cmp.Compare(a[i], b[i]); c != 0 {
				return c
			}
		}
		return 0
	})
	return out
}
