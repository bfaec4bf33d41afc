package jsonx_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/schedule"
	"github.com/tenurekit/tenure/session"
)

func marshal(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The state values an operator or a script reads marshal to readable JSON:
// times in RFC 3339, durations as strings, zero times left out, no secret
// and no private value.
func TestStateValuesMarshalReadably(t *testing.T) {
	at := time.Date(2026, 12, 1, 14, 30, 0, 123000000, time.FixedZone("X", 3600))
	for _, c := range []struct {
		name string
		v    any
		want string
	}{
		{"lease info held", lease.Info{Key: "k", Held: true, Fence: 7, TTL: 1500 * time.Millisecond},
			`{"key":"k","held":true,"fence":7,"ttl":"1.5s"}`},
		{"lease info free", lease.Info{Key: "k", Fence: 7}, `{"key":"k","held":false,"fence":7}`},
		{"lease grant", lease.Grant{Fence: 9, TTL: 30 * time.Second}, `{"fence":9,"ttl":"30s"}`},
		{"rate limit decision", ratelimit.Decision{Allowed: false, Remaining: 0, RetryAfter: 2 * time.Second, ResetAfter: time.Minute,
			Limit: ratelimit.Limit{Name: "api", Rate: 100, Period: time.Minute, Burst: 20}, Algorithm: ratelimit.GCRA, At: at},
			`{"allowed":false,"remaining":0,"retry_after":"2s","reset_after":"1m0s","limit":{"name":"api","rate":100,"period":"1m0s","burst":20},"algorithm":"gcra","at":"2026-12-01T13:30:00.123Z"}`},
		{"schedule record", schedule.Record{Job: "settle", SlotID: "s1", SlotTime: at, State: schedule.State("done"), Node: "n1", Attempts: 1, Fence: 4, Started: at},
			`{"job":"settle","slot_id":"s1","slot_time":"2026-12-01T13:30:00.123Z","state":"done","node":"n1","attempts":1,"fence":4,"started":"2026-12-01T13:30:00.123Z"}`},
		{"session record", session.Record{ID: "ab", UserID: "alice", Data: []byte("secret-cart"), Version: 2, Created: at},
			`{"id":"ab","user_id":"alice","version":2,"created":"2026-12-01T13:30:00.123Z","data_bytes":11}`},
		{"idempotency record", idempotency.Record{ID: idempotency.ID{Scope: "s", Key: "k"}, Exists: true, Completed: true, Fence: 3,
			Expires: time.Hour, Outcome: idempotency.Outcome{Value: []byte("private")}},
			`{"scope":"s","key":"k","exists":true,"completed":true,"fence":3,"expires":"1h0m0s","value_bytes":7}`},
	} {
		if got := marshal(t, c.v); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
}

func TestSessionMarshalsWithoutValuesOrToken(t *testing.T) {
	m, err := session.New(newMem(t, nil).Sessions(), nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, s, err := m.Create(t.Context(), "alice", map[string]string{"cart": "private-cart"})
	if err != nil {
		t.Fatal(err)
	}
	out := marshal(t, s)
	if strings.Contains(out, tok.Reveal()) || strings.Contains(out, "private-cart") {
		t.Fatalf("session JSON reveals a secret or a value: %s", out)
	}
	for _, want := range []string{`"user_id":"alice"`, `"values":1`, `"version":1`, `"absolute_until":"`} {
		if !strings.Contains(out, want) {
			t.Errorf("session JSON %s lacks %s", out, want)
		}
	}
}

func TestLimitRoundTrips(t *testing.T) {
	in := ratelimit.Limit{Name: "api", Rate: 5, Period: 1500 * time.Millisecond, Burst: 7}
	var out ratelimit.Limit
	if err := json.Unmarshal([]byte(marshal(t, in)), &out); err != nil || out != in {
		t.Fatalf("round trip: %+v %v, want %+v", out, err, in)
	}
	if err := json.Unmarshal([]byte(`{"name":"n","rate":1,"period":1000000000}`), &out); err != nil || out.Period != time.Second {
		t.Fatalf("period in nanoseconds: %+v %v", out, err)
	}
	for _, bad := range []string{`{"period":"soon"}`, `{"period":true}`} {
		if err := json.Unmarshal([]byte(bad), &out); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	var a ratelimit.Algorithm
	if err := json.Unmarshal([]byte(`"sliding-window"`), &a); err != nil || a != ratelimit.SlidingWindow {
		t.Fatalf("algorithm: %v %v", a, err)
	}
	if err := json.Unmarshal([]byte(`"leaky"`), &a); err == nil {
		t.Fatal("unknown algorithm accepted")
	}
}
