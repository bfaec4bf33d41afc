package etcdstore_test

import (
	"errors"
	"github.com/tenurekit/tenure"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/etcdstore"
)

func TestNewRefusesBadOptions(t *testing.T) {
	t.Parallel()
	srv := testenv.SharedEtcd(t)
	c := newClient(t, srv.Endpoints()...)
	ctx := ctxT(t)
	good := uniquePrefix(t)
	for _, tc := range []struct {
		name string
		c    *clientv3.Client
		o    *etcdstore.Options
	}{
		{"nil client", nil, nil},
		{"nil client with options", nil, &etcdstore.Options{Prefix: good}},
		{"prefix not UTF-8", c, &etcdstore.Options{Prefix: good + "\xff/"}},
		{"prefix with NUL", c, &etcdstore.Options{Prefix: good + "\x00/"}},
		{"prefix too long", c, &etcdstore.Options{Prefix: good + strings.Repeat("p", etcdstore.MaxPrefixLen)}},
		{"negative RevokeTimeout", c, &etcdstore.Options{Prefix: good, RevokeTimeout: -time.Second}},
		{"most negative RevokeTimeout", c, &etcdstore.Options{Prefix: good, RevokeTimeout: -1 << 63}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := etcdstore.New(tc.c, tc.o)
			if s != nil || !errors.Is(err, tenure.ErrInvalid) {
				t.Fatalf("New = %v, %v; want nil and an error wrapping tenure.ErrInvalid", s, err)
			}
		})
	}
	if resp, err := c.Get(ctx, good, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
		t.Fatalf("keys under the refused prefixes: %v, %v", resp, err)
	}

	// nil and zero Options are the defaults: keys under "tenure/"; the
	// longest prefix is accepted.
	for _, tc := range []struct {
		name   string
		o      *etcdstore.Options
		prefix string
	}{
		{"nil", nil, etcdstore.DefaultPrefix},
		{"zero", &etcdstore.Options{}, etcdstore.DefaultPrefix},
		{"longest prefix", &etcdstore.Options{Prefix: good + strings.Repeat("p", etcdstore.MaxPrefixLen-len(good))}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := etcdstore.New(c, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			prefix := tc.prefix
			if prefix == "" {
				prefix = tc.o.Prefix
			}
			key, tok := uniquePrefix(t)+"k", lease.NewToken()
			if _, err := s.Leases().Acquire(ctx, key, tok, time.Minute); err != nil {
				t.Fatal(err)
			}
			if resp, err := c.Get(ctx, prefix+"lock/"+key); err != nil || len(resp.Kvs) != 1 {
				t.Fatalf("lock key under %q: %v %v", prefix, resp, err)
			}
			if err := s.Leases().Release(ctx, key, tok); err != nil {
				t.Fatal(err)
			}
		})
	}
}
