package driver

import (
	"errors"
	"testing"
	"time"
)

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"a", "billing.settle-v2", "x:y@z~1+2"} {
		if err := ValidateName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a/b", "a b", "{x}", string(make([]byte, 129))} {
		if err := ValidateName(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	job, rest, ok := JobOfKey(ClaimKey("j", "2026-01-01T00:00:00Z"))
	if !ok || job != "j" || rest != "slot/2026-01-01T00:00:00Z" {
		t.Fatalf("JobOfKey = %q %q %v", job, rest, ok)
	}
}

func TestHistoryRoundTrip(t *testing.T) {
	h := []Attempt{
		{Node: "a", Fence: 1<<63 - 1, Started: time.UnixMicro(1_800_000_000_123_456), Outcome: AttemptSuperseded},
		{Node: "b", Fence: 2, Started: time.UnixMicro(1_800_000_001_000_000), Finished: time.UnixMicro(1_800_000_002_000_001), Outcome: AttemptFailed, Error: "boom \"quoted\" é"},
	}
	got, err := DecodeHistory(EncodeHistory(h))
	if err != nil || len(got) != 2 {
		t.Fatalf("%+v, %v", got, err)
	}
	for i := range h {
		if got[i].Node != h[i].Node || got[i].Fence != h[i].Fence || !got[i].Started.Equal(h[i].Started) ||
			!got[i].Finished.Equal(h[i].Finished) || got[i].Outcome != h[i].Outcome || got[i].Error != h[i].Error {
			t.Fatalf("attempt %d: %+v, want %+v", i, got[i], h[i])
		}
	}
	for _, empty := range []string{"", "{}", "[]"} {
		if got, err := DecodeHistory(empty); err != nil || len(got) != 0 {
			t.Fatalf("DecodeHistory(%q) = %+v, %v", empty, got, err)
		}
	}
	if _, err := DecodeHistory(`[{"f":"x"}]`); err == nil {
		t.Fatal("a malformed fence decoded")
	}
	// The bound and the takeover.
	var hist []Attempt
	for f := uint64(1); f <= MaxHistory+3; f++ {
		hist = BeginAttempt(hist, Attempt{Fence: f, Outcome: AttemptRunning})
	}
	if len(hist) != MaxHistory || hist[0].Fence != 4 || hist[0].Outcome != AttemptSuperseded || hist[MaxHistory-1].Outcome != AttemptRunning {
		t.Fatalf("history after %d attempts: %+v", MaxHistory+3, hist)
	}
	ended := EndAttempt(hist, MaxHistory+3, time.UnixMicro(5), AttemptDone, "")
	if ended[MaxHistory-1].Outcome != AttemptDone || hist[MaxHistory-1].Outcome != AttemptRunning {
		t.Fatal("EndAttempt did not end the attempt on a copy")
	}
}

// FuzzHistory: a decoded history encodes and decodes to itself, and
// nothing panics.
func FuzzHistory(f *testing.F) {
	f.Add(``)
	f.Add(`{}`)
	f.Add(`[{"n":"a","f":"1","s":"1800000000123456","e":"0","o":"running"}]`)
	f.Add(`[{"n":"b","f":"9223372036854775807","s":"1","e":"2","o":"failed","err":"boom\u0000"}]`)
	f.Add(`[{"f":"-1"}]`)
	f.Fuzz(func(t *testing.T, s string) {
		h, err := DecodeHistory(s)
		if err != nil {
			return
		}
		again, err := DecodeHistory(EncodeHistory(h))
		if err != nil || len(again) != len(h) {
			t.Fatalf("round trip of %+v: %+v, %v", h, again, err)
		}
		for i := range h {
			a, b := h[i], again[i]
			if a.Node != b.Node || a.Fence != b.Fence || !a.Started.Equal(b.Started) || !a.Finished.Equal(b.Finished) ||
				a.Outcome != b.Outcome || a.Error != b.Error {
				t.Fatalf("attempt %d: %+v became %+v", i, a, b)
			}
		}
	})
}
