package redisstore_test

import (
	"errors"
	"github.com/tenurekit/tenure"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/redisstore"
)

func TestNewRefusesBadOptions(t *testing.T) {
	srv := testenv.SharedRedis(t)
	rc := newClient(t, srv.Addr())
	gc := newGoClient(t, srv.Addr())
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr()}, MaxRetries: -1})
	t.Cleanup(func() { _ = ring.Close() })
	prefix := uniq(t, "newopts") + ":"
	ctors := []struct {
		name string
		new  func(o *redisstore.Options) (*redisstore.Store, error)
	}{
		{"New", func(o *redisstore.Options) (*redisstore.Store, error) { return redisstore.New(rc, o) }},
		{"NewGoRedis", func(o *redisstore.Options) (*redisstore.Store, error) { return redisstore.NewGoRedis(gc, o) }},
	}
	type tcase struct {
		name string
		new  func() (*redisstore.Store, error)
	}
	cases := []tcase{
		{"New nil client", func() (*redisstore.Store, error) { return redisstore.New(nil, nil) }},
		{"NewGoRedis nil client", func() (*redisstore.Store, error) { return redisstore.NewGoRedis(nil, nil) }},
		{"NewGoRedis nil *redis.Client", func() (*redisstore.Store, error) { return redisstore.NewGoRedis((*redis.Client)(nil), nil) }},
		{"NewGoRedis nil *redis.ClusterClient", func() (*redisstore.Store, error) {
			return redisstore.NewGoRedis((*redis.ClusterClient)(nil), nil)
		}},
		{"NewGoRedis Ring", func() (*redisstore.Store, error) { return redisstore.NewGoRedis(ring, nil) }},
	}
	for _, c := range ctors {
		for _, d := range []time.Duration{-time.Nanosecond, -time.Hour, redisstore.MaxFenceRetention + time.Millisecond, 1 << 62} {
			o := &redisstore.Options{Prefix: prefix, FenceRetention: d}
			cases = append(cases, tcase{c.name + " FenceRetention " + d.String(), func() (*redisstore.Store, error) { return c.new(o) }})
		}
	}
	for _, c := range ctors {
		for name, r := range map[string]redisstore.Replication{
			"Replicas -1":       {Replicas: -1},
			"Replicas too many": {Replicas: redisstore.MaxConfirmReplicas + 1},
			"Timeout 1ns":       {Timeout: time.Nanosecond},
			"Timeout negative":  {Timeout: -time.Second},
			"Timeout too long":  {Timeout: redisstore.MaxConfirmTimeout + time.Millisecond},
			"Command unknown":   {Command: redisstore.ConfirmWait + 1},
		} {
			o := &redisstore.Options{Prefix: prefix, Replication: r}
			cases = append(cases, tcase{c.name + " Replication " + name, func() (*redisstore.Store, error) { return c.new(o) }})
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := c.new()
			if s != nil || !errors.Is(err, tenure.ErrInvalid) {
				t.Fatalf("= %v, %v; want nil and an error wrapping tenure.ErrInvalid", s, err)
			}
		})
	}
	if keys := prefixKeys(t, rc, prefix); len(keys) != 0 {
		t.Fatalf("keys written: %v", keys)
	}

	// nil and zero Options are the defaults: keys under "tenure:", with a
	// fence retention of 7 days.
	for _, c := range ctors {
		for _, o := range []*redisstore.Options{nil, {}} {
			s, err := c.new(o)
			if err != nil {
				t.Fatalf("%s(%+v): %v", c.name, o, err)
			}
			key, tok := uniq(t, "k"), lease.NewToken()
			if _, err := s.Leases().Acquire(ctxT(t), key, tok, time.Minute); err != nil {
				t.Fatalf("%s(%+v): Acquire: %v", c.name, o, err)
			}
			keys := prefixKeys(t, rc, redisstore.DefaultPrefix+"{"+key+"}")
			if len(keys) == 0 {
				t.Fatalf("%s(%+v): no key under the default prefix", c.name, o)
			}
			for _, k := range keys {
				ttl, err := rc.Do(ctxT(t), rc.B().Pttl().Key(k).Build()).AsInt64()
				if err != nil || ttl > int64(redisstore.DefaultFenceRetention/time.Millisecond)+int64(2*time.Minute/time.Millisecond) {
					t.Fatalf("%s(%+v): key %s has TTL %dms (%v)", c.name, o, k, ttl, err)
				}
			}
			if err := s.Leases().Release(ctxT(t), key, tok); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// prefixKeys lists the keys that start with prefix.
func prefixKeys(t *testing.T, c rueidis.Client, prefix string) []string {
	t.Helper()
	var out []string
	var cursor uint64
	for {
		e, err := c.Do(ctxT(t), c.B().Scan().Cursor(cursor).Match(prefix+"*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e.Elements...)
		if cursor = e.Cursor; cursor == 0 {
			return out
		}
	}
}
