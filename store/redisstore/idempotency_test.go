package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/store/redisstore"
)

// TestIdempotencyKeys checks the stored hash: its key and hash tag, its
// fields, and an expiry at the end of the retention.
func TestIdempotencyKeys(t *testing.T) {
	srv := testenv.SharedRedis(t)
	c := newClient(t, srv.Addr())
	s := checked(t, c, &redisstore.Options{Prefix: uniq(t, "p") + ":"})
	ctx := ctxT(t)
	k, err := idempotency.New(s.Idempotency(), &idempotency.Options{Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	req := idempotency.Request{Scope: "user:{1}", Key: "a}b%", Fingerprint: "fp"}
	if _, err := k.Do(ctx, req, func(context.Context, *idempotency.Claim) ([]byte, error) {
		return []byte("bin\x00ary"), nil
	}); err != nil {
		t.Fatal(err)
	}
	key := redisstore.IdempotencyKey(s, req.ID())
	if want := uniq(t, "p"); len(key) < len(want) {
		t.Fatalf("key %q", key)
	}
	if slot, want := testenv.KeySlot(key), testenv.KeySlot("{12:user:%7B1%7Da%7Db%25}"); slot != want {
		t.Fatalf("key %q in slot %d, want the slot of its escaped identity %d", key, slot, want)
	}
	h, err := c.Do(ctx, c.B().Hgetall().Key(key).Build()).AsStrMap()
	if err != nil {
		t.Fatal(err)
	}
	if h["st"] != "2" || h["fp"] != "fp" || h["v"] != "bin\x00ary" || h["tok"] == "" || h["f"] == "" {
		t.Fatalf("stored hash %q", h)
	}
	if ttl := pttl(t, c, key); ttl <= 59*time.Minute || ttl > time.Hour+time.Second {
		t.Fatalf("PTTL %v, want about the hour of retention", ttl)
	}
	// A foreign value at the key is an error, not a claim.
	bad := idempotency.Request{Scope: "s", Key: "wrongtype"}
	if err := c.Do(ctx, c.B().Set().Key(redisstore.IdempotencyKey(s, bad.ID())).Value("x").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	ran := false
	_, err = k.Do(ctx, bad, func(context.Context, *idempotency.Claim) ([]byte, error) { ran = true; return nil, nil })
	if err == nil || ran || errors.Is(err, idempotency.ErrInvalid) {
		t.Fatalf("Do on a string key: %v (ran %v), want a server error and no run", err, ran)
	}
	if rueidis.IsRedisNil(err) {
		t.Fatal("nil reply")
	}
}
