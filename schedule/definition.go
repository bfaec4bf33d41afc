package schedule

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	scheddriver "github.com/tenurekit/tenure/schedule/driver"
)

// Definitions
//
// Every node runs its own copy of a job's definition. When they disagree
// (a rolling deploy that changes a cron expression, a zone or a policy),
// the store decides which one runs, by one rule:
//
//	The most recently registered definition wins.
//
// A Scheduler registers each job's definition (its Fingerprint) with the
// store once, at its first poll of the job (or its first Claim), before it
// starts or records any slot of it. Every Begin and Mark carries the
// fingerprint, and the store refuses one whose fingerprint is not the
// job's current one (ErrSuperseded), in the same atomic step that would
// record the attempt. So once a node registered a new definition, a node
// with another one cannot start a slot, nor record one missed or skipped:
// two definitions never fire their own slots for the same period. An
// attempt that began before the switch runs to its end.
//
// A superseded node logs a warning, starts no slot of the job and records
// none; it looks at the registered definition at every poll and resumes if
// its own becomes the current one again (another node registered it). It
// never registers again by itself: restart it with the current
// definition. A node restarted with an old definition registers it and so
// takes the job back; the nodes with the newer one then stand down, with a
// warning.

// withDefaults returns j with every zero setting at its default.
func (j Job) withDefaults() Job {
	if j.MisfireThreshold == 0 {
		j.MisfireThreshold = time.Minute
	}
	if j.CatchUpWindow == 0 {
		j.CatchUpWindow = 24 * time.Hour
	}
	if j.CatchUpConcurrency == 0 {
		j.CatchUpConcurrency = 1
	}
	if j.Retry.Attempts == 0 {
		j.Retry.Attempts = 1
	}
	if j.Retry.Backoff == 0 {
		j.Retry.Backoff = time.Second
	}
	if j.Retry.MaxBackoff == 0 {
		j.Retry.MaxBackoff = time.Minute
	}
	return j
}

// Spec describes the job's definition, with defaults applied: its
// schedule (Schedule.String, which for Cron includes the zone), misfire
// and overlap policies, catch-up window and concurrency, timeout and
// retries. Two definitions that run the same way have the same Spec.
func (j Job) Spec() string {
	j = j.withDefaults()
	sched := "<nil>"
	if j.Schedule != nil {
		sched = j.Schedule.String()
	}
	return fmt.Sprintf("%s; misfire %s after %v (catch-up window %v, concurrency %d); overlap %s; timeout %v; retry attempts %d backoff %v max %v",
		sched, j.Misfire, j.MisfireThreshold, j.CatchUpWindow, j.CatchUpConcurrency, j.Overlap, j.Timeout,
		j.Retry.Attempts, j.Retry.Backoff, j.Retry.MaxBackoff)
}

// Fingerprint identifies the job's definition: the first 16 bytes of the
// SHA-256 of its name and Spec, in hex. Nodes whose definitions run the
// same way have the same fingerprint.
func (j Job) Fingerprint() string {
	sum := sha256.Sum256([]byte(j.Name + "\x00" + j.Spec()))
	return hex.EncodeToString(sum[:16])
}

// register registers the job's definition with the store, once.
func (s *Scheduler) register(ctx context.Context, js *jobState) error {
	s.mu.Lock()
	done := js.registered
	s.mu.Unlock()
	if done {
		return nil
	}
	prev, err := s.store.Register(ctx, scheddriver.RegisterRequest{Job: js.job.Name, Fingerprint: js.fp, Spec: js.spec, Node: s.o.Node})
	if err != nil {
		return err
	}
	s.mu.Lock()
	js.registered, js.stale = true, false
	s.mu.Unlock()
	if prev.Fingerprint != "" && prev.Fingerprint != js.fp {
		s.log.Warn("schedule: this node's definition of the job replaces the registered one; nodes that run the other one start no slot of it from now on",
			"job", js.job.Name, "definition", js.spec, "fingerprint", js.fp,
			"replaced", prev.Spec, "replaced_fingerprint", prev.Fingerprint,
			"replaced_node", prev.Node, "replaced_registered", prev.Registered)
	}
	return nil
}

func (s *Scheduler) isStale(js *jobState) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return js.stale
}

// superseded marks the job's definition on this node superseded, with a
// warning the first time.
func (s *Scheduler) superseded(ctx context.Context, js *jobState) {
	s.mu.Lock()
	was := js.stale
	js.stale = true
	s.mu.Unlock()
	if was {
		return
	}
	cur, err := s.store.Definition(ctx, js.job.Name)
	if err != nil {
		cur = Definition{Spec: "unknown (" + err.Error() + ")"}
	}
	s.log.Warn("schedule: another definition of the job is the registered one; this node starts and records no slot of it until its own is current again (restart it with the current definition)",
		"job", js.job.Name, "definition", js.spec, "fingerprint", js.fp,
		"current", cur.Spec, "current_fingerprint", cur.Fingerprint,
		"current_node", cur.Node, "current_registered", cur.Registered)
}

// current reports whether the job's registered definition is this node's
// again (it clears the stale mark then).
func (s *Scheduler) current(ctx context.Context, js *jobState) bool {
	cur, err := s.store.Definition(ctx, js.job.Name)
	if err != nil && !errors.Is(err, ErrNotFound) {
		s.log.Debug("schedule: cannot read the job's definition", "job", js.job.Name, "err", err)
		return false
	}
	if err == nil && cur.Fingerprint != js.fp {
		return false
	}
	s.mu.Lock()
	js.stale = false
	s.mu.Unlock()
	s.log.Info("schedule: this node's definition of the job is the registered one again; it runs its slots",
		"job", js.job.Name, "fingerprint", js.fp)
	return true
}
