package schedule

import (
	"strings"
	"testing"
	"time"
)

func TestFingerprint(t *testing.T) {
	base := Job{Name: "settle", Schedule: Every(time.Minute)}
	explicit := base
	explicit.MisfireThreshold, explicit.CatchUpWindow, explicit.CatchUpConcurrency = time.Minute, 24*time.Hour, 1
	explicit.Retry = Retry{Attempts: 1, Backoff: time.Second, MaxBackoff: time.Minute}
	if base.Fingerprint() != explicit.Fingerprint() || base.Spec() != explicit.Spec() {
		t.Fatalf("defaults left zero and set explicitly differ: %s vs %s", base.Spec(), explicit.Spec())
	}
	if err := ValidateFingerprint(base.Fingerprint()); err != nil {
		t.Fatal(err)
	}
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Skip(err)
	}
	cronUTC, _ := Cron("0 9 * * *", nil)
	cronParis, _ := Cron("0 9 * * *", paris)
	cron10, _ := Cron("0 10 * * *", nil)
	variants := map[string]Job{
		"base":     base,
		"renamed":  {Name: "other", Schedule: Every(time.Minute)},
		"interval": {Name: "settle", Schedule: Every(2 * time.Minute)},
		"cron":     {Name: "settle", Schedule: cronUTC},
		"zone":     {Name: "settle", Schedule: cronParis},
		"hour":     {Name: "settle", Schedule: cron10},
		"misfire":  {Name: "settle", Schedule: Every(time.Minute), Misfire: MisfireCatchUp},
		"overlap":  {Name: "settle", Schedule: Every(time.Minute), Overlap: OverlapAllow},
		"timeout":  {Name: "settle", Schedule: Every(time.Minute), Timeout: time.Second},
		"retry":    {Name: "settle", Schedule: Every(time.Minute), Retry: Retry{Attempts: 3}},
		"window":   {Name: "settle", Schedule: Every(time.Minute), CatchUpWindow: time.Hour},
	}
	seen := map[string]string{}
	for name, j := range variants {
		fp := j.Fingerprint()
		if other, dup := seen[fp]; dup {
			t.Fatalf("%s and %s share fingerprint %s", name, other, fp)
		}
		seen[fp] = name
	}
	if !strings.Contains(variants["zone"].Spec(), "Europe/Paris") {
		t.Fatalf("spec without the zone: %s", variants["zone"].Spec())
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
