// Package doctor checks a store's configuration for what would break
// tenure's guarantees (an evicting Redis, an asynchronous PostgreSQL
// commit, a SQLite file without WAL or busy timeout, a clock far from this
// host's) and says how to fix each finding. It is the engine of
// `tenure doctor`.
package doctor

import (
	"context"
	"fmt"
	"time"

	"github.com/tenurekit/tenure/internal/storeurl"
)

// Status grades a finding.
type Status string

// The statuses, from good to bad.
const (
	// OK: nothing to do.
	OK Status = "ok"
	// Info: a fact worth knowing (a version, the release path taken).
	Info Status = "info"
	// Warn: works, but weaker than it could be; the fix says how.
	Warn Status = "warn"
	// Unsafe: a guarantee does not hold on this store as configured.
	Unsafe Status = "unsafe"
)

// Finding is the result of one check.
type Finding struct {
	// Check names what was checked ("maxmemory-policy", "clock offset").
	Check string `json:"check"`
	// Status grades it.
	Status Status `json:"status"`
	// Detail says what was found.
	Detail string `json:"detail"`
	// Fix says what to change, for Warn and Unsafe.
	Fix string `json:"fix,omitempty"`
}

// Report is what Run found on one store.
type Report struct {
	// Store is the store's kind ("redis", "postgres", …).
	Store string `json:"store"`
	// Target is where it is, without any password.
	Target string `json:"target"`
	// Findings are in the order the checks ran.
	Findings []Finding `json:"findings"`
}

// Unsafe reports whether any finding is Unsafe.
func (r Report) Unsafe() bool {
	for _, f := range r.Findings {
		if f.Status == Unsafe {
			return true
		}
	}
	return false
}

func (r *Report) add(check string, st Status, detail, fix string) {
	r.Findings = append(r.Findings, Finding{Check: check, Status: st, Detail: detail, Fix: fix})
}

// Options tune the checks. Nil means the defaults.
type Options struct {
	// MaxClockOffset is the clock offset between this host and the store
	// above which the offset is reported as a warning. Expiry is judged on
	// the store's clock alone, so an offset breaks nothing tenure promises,
	// but it makes times in logs and audits disagree. Default 1s.
	MaxClockOffset time.Duration
	// Schema is the PostgreSQL schema tenure's tables are in. Default
	// "tenure".
	Schema string
}

// Run checks the store spec names. An error means the store could not be
// reached or asked at all; everything it could ask is in the Report.
func Run(ctx context.Context, spec storeurl.Spec, o *Options) (Report, error) {
	var opt Options
	if o != nil {
		opt = *o
	}
	if opt.MaxClockOffset <= 0 {
		opt.MaxClockOffset = time.Second
	}
	if opt.Schema == "" {
		opt.Schema = "tenure"
	}
	r := Report{Store: string(spec.Kind), Target: spec.Redacted()}
	var err error
	switch spec.Kind {
	case storeurl.Memory, storeurl.Embedded:
		r.add("store", Info, "the in-process store: its state lives and dies with the process", "")
		if spec.Kind == storeurl.Embedded {
			r.add("embedded default", Info, "without --store, commands use a new SQLite file in a temporary directory: point --store at sqlite:PATH to check the file your service uses", "")
		}
	case storeurl.SQLite:
		err = checkSQLite(ctx, spec.Path, &r)
	case storeurl.Redis:
		err = checkRedis(ctx, spec.URL, opt, &r)
	case storeurl.Postgres:
		err = checkPostgres(ctx, spec.URL, opt, &r)
	case storeurl.Etcd:
		err = checkEtcd(ctx, spec.Endpoints, &r)
	default:
		err = fmt.Errorf("doctor: no checks for a %s store", spec.Kind)
	}
	return r, err
}

// clockFinding grades the offset between this host's clock (the midpoint
// of the request) and the store's.
func clockFinding(r *Report, sent, received, store time.Time, max time.Duration) {
	mid := sent.Add(received.Sub(sent) / 2)
	off := store.Sub(mid)
	abs := off
	if abs < 0 {
		abs = -abs
	}
	detail := fmt.Sprintf("the store's clock is %v %s this host's (round trip %v)", abs.Round(time.Millisecond), map[bool]string{true: "ahead of", false: "behind"}[off >= 0], received.Sub(sent).Round(time.Microsecond))
	if abs > max {
		r.add("clock offset", Warn, detail,
			"run NTP (chrony, systemd-timesyncd) on both hosts; expiry is judged on the store's clock alone, so this is safe, but timestamps in logs and audits will disagree")
		return
	}
	r.add("clock offset", OK, detail, "")
}
