package schedule

import (
	"strings"
	"testing"
	"time"

	scheddriver "github.com/tenurekit/tenure/schedule/driver"
)

func TestFingerprint(t *testing.T) {
	base := Job{Name: "settle", Schedule: Every(time.Minute)}
	explicit := base
	explicit.MisfireThreshold, explicit.CatchUpWindow, explicit.CatchUpConcurrency = time.Minute, 24*time.Hour, 1
	explicit.Retry = Retry{Attempts: 1, Backoff: time.Second, MaxBackoff: time.Minute}
	if base.Fingerprint() != explicit.Fingerprint() || base.Spec() != explicit.Spec() {
		t.Fatalf("defaults left zero and set explicitly differ: %s vs %s", base.Spec(), explicit.Spec())
	}
	if err := scheddriver.ValidateFingerprint(base.Fingerprint()); err != nil {
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
