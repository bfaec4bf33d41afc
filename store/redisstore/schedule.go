package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
	"github.com/tenurekit/tenure/store/redisstore/internal/rclient"

	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
	"github.com/tenurekit/tenure/schedule"
	scheddriver "github.com/tenurekit/tenure/schedule/driver"
)

// Lua scripts of the schedule view.
var (
	//go:embed lua/schedule_begin.lua
	schedBeginSrc string
	//go:embed lua/schedule_finish.lua
	schedFinishSrc string
	//go:embed lua/schedule_mark.lua
	schedMarkSrc string
	//go:embed lua/schedule_complete.lua
	schedCompleteSrc string
	//go:embed lua/schedule_register.lua
	schedRegisterSrc string

	schedBeginScript    = rclient.NewScript(schedBeginSrc)
	schedFinishScript   = rclient.NewScript(schedFinishSrc)
	schedMarkScript     = rclient.NewScript(schedMarkSrc)
	schedCompleteScript = rclient.NewScript(schedCompleteSrc)
	schedRegisterScript = rclient.NewScript(schedRegisterSrc)
)

// schedKeep is how long (ms) a claim's fence key outlives its claim (and
// Inspect reports a claim's last fence). A fence key that expired is
// harmless: the next fence is above the fence floor of the job's hash slot
// and TIME.
const schedKeep = "3600000"

// schedTag is the key prefix of everything a job keeps: one hash tag per
// job, so that a claim, the ledger, the records and the job's values are
// in one hash slot of a Redis Cluster and one script can check and write
// them together.
func (s *Store) schedTag(job string) string { return s.prefix + "{sched:" + escape(job) + "}:" }

type schedKeys struct{ rec, slots, open, ledger, def string }

func (s *Store) schedKeys(job, id string) schedKeys {
	tag := s.schedTag(job)
	return schedKeys{rec: tag + "rec:" + id, slots: tag + "slots", open: tag + "open", ledger: tag + "ledger", def: tag + "def"}
}

// schedClaimKeys maps a claims key ("schedule/<job>/<rest>") to its lock
// and fence keys in the job's hash tag.
func (s *Store) schedClaimKeys(key string) (lock, fenceKey string, err error) {
	job, rest, ok := scheddriver.JobOfKey(key)
	if !ok || scheddriver.ValidateName(job) != nil {
		return "", "", fmt.Errorf("%w: redisstore: %q is not a schedule claims key", lease.ErrInvalid, key)
	}
	tag := s.schedTag(job) + "lease:" + rest
	return tag + ":lock", tag + ":fence", nil
}

// schedFloorKey returns the fence floor of the hash slot of a valid claims
// key's job (see floorKey).
func (s *Store) schedFloorKey(key string) string {
	job, _, _ := scheddriver.JobOfKey(key)
	return s.floorKey("sched:" + escape(job))
}

// schedHolderKey returns the holder key next to a claim's lock key, which
// the lease scripts take as their third key. Claims give no description,
// so it is never written.
func schedHolderKey(lock string) string { return strings.TrimSuffix(lock, "lock") + "holder" }

// Schedules returns the store's schedule.Store view. Everything of a job
// (claims, records, the ledger, the values CompleteSlot writes) lives under
// one hash tag, {sched:<job>}, and each write is one Lua script judged on
// the server's TIME. Records are kept until deleted.
func (s *Store) Schedules() schedule.Store { return schedules{s} }

type schedules struct{ s *Store }

// Claims returns a lease store for the keys of scheddriver.ClaimKey, RunKey
// and PermitKey: the store's own lease scripts, on keys in the job's hash
// tag (other keys are refused with lease.ErrInvalid).
func (v schedules) Claims() lease.Store { return schedClaims(v) }

func (v schedules) Now(ctx context.Context) (time.Time, error) {
	s := v.s
	arr, err := s.c.Do(ctx, rclient.Cmd{Name: "TIME", ReadOnly: true}).ToArray()
	if err != nil {
		return time.Time{}, v.fail(err)
	}
	if len(arr) != 2 {
		return time.Time{}, malformed("TIME")
	}
	sec, err1 := arr[0].AsInt64()
	us, err2 := arr[1].AsInt64()
	if err1 != nil || err2 != nil {
		return time.Time{}, malformed("TIME")
	}
	return time.Unix(sec, us*1000), nil
}

func (v schedules) fail(err error) error {
	err = v.s.fail(err)
	if errors.Is(err, lease.ErrUnavailable) {
		return fmt.Errorf("%w: %w", schedule.ErrUnavailable, err)
	}
	if errors.Is(err, lease.ErrInvalid) {
		return fmt.Errorf("%w: %w", schedule.ErrInvalid, err)
	}
	return err
}

func usStr(t time.Time) string { return strconv.FormatInt(t.UnixMicro(), 10) }

// schedFlat turns a flat field/value reply of a script into a map.
func schedFlat(flat []rclient.Message) (map[string]string, error) {
	m := make(map[string]string, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		k, err1 := flat[i].ToString()
		val, err2 := flat[i+1].ToString()
		if err1 != nil || err2 != nil {
			return nil, malformed("schedule record")
		}
		m[k] = val
	}
	return m, nil
}

// schedRecord parses a record hash.
func schedRecord(job, id string, m map[string]string) schedule.Record {
	r := schedule.Record{Job: job, SlotID: id}
	us := func(s string) time.Time {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return time.Time{}
		}
		return time.UnixMicro(n)
	}
	for k, val := range m {
		switch k {
		case "t":
			r.SlotTime = us(val)
		case "st":
			r.State = schedule.State(val)
		case "node":
			r.Node = val
		case "att":
			r.Attempts, _ = strconv.Atoi(val)
		case "f":
			r.Fence, _ = strconv.ParseUint(val, 10, 64)
		case "s":
			r.Started = us(val)
		case "e":
			r.Finished = us(val)
		case "err":
			r.Error = val
		case "r":
			r.RetryAt = us(val)
		case "h":
			// A malformed history is left out; the record itself stands.
			r.History, _ = scheddriver.DecodeHistory(val)
		}
	}
	return r
}

// schedReply splits a script reply {status, number, record...}.
func schedReply(job, id string, arr []rclient.Message, what string) (string, int64, schedule.Record, error) {
	if len(arr) < 2 {
		return "", 0, schedule.Record{}, malformed(what)
	}
	st, err1 := arr[0].ToString()
	n, err2 := arr[1].AsInt64()
	if err1 != nil || err2 != nil {
		return "", 0, schedule.Record{}, malformed(what)
	}
	m, err := schedFlat(arr[2:])
	if err != nil {
		return "", 0, schedule.Record{}, err
	}
	return st, n, schedRecord(job, id, m), nil
}

func schedStale(job, id string, f uint64) error {
	return fmt.Errorf("redisstore: slot %s of %q: the attempt with fence %d is not the current one: %w", id, job, f, schedule.ErrStale)
}

func schedSuperseded(job, fp string) error {
	return fmt.Errorf("redisstore: job %q: definition %s is not the registered one: %w", job, fp, schedule.ErrSuperseded)
}

func (v schedules) Begin(ctx context.Context, req scheddriver.BeginRequest) (schedule.Record, error) {
	if err := req.Validate(); err != nil {
		return schedule.Record{}, err
	}
	s := v.s
	if err := s.ready(ctx); err != nil {
		return schedule.Record{}, v.fail(err)
	}
	k := s.schedKeys(req.Job, req.SlotID)
	skip := "0"
	if req.Skip {
		skip = "1"
	}
	res, p := s.write(ctx, schedBeginScript, []string{k.rec, k.slots, k.open, k.ledger, k.def},
		[]string{req.SlotID, usStr(req.SlotTime), req.Node, strconv.FormatUint(req.Fence, 10), skip, scheddriver.CutError(req.Reason), req.Definition}, false)
	arr, err := res.ToArray()
	if err != nil {
		return schedule.Record{}, v.fail(err)
	}
	st, n, r, err := schedReply(req.Job, req.SlotID, arr, "schedule begin")
	if err != nil {
		return schedule.Record{}, err
	}
	switch st {
	case "ok":
		if err := s.confirm(ctx, p); err != nil {
			return schedule.Record{}, v.fail(err)
		}
		return r, nil
	case "final":
		return schedule.Record{}, &schedule.FinalError{Record: r}
	case "notdue":
		return schedule.Record{}, &schedule.NotDueError{Wait: time.Duration(n) * time.Microsecond}
	case "stale":
		return schedule.Record{}, schedStale(req.Job, req.SlotID, req.Fence)
	case "superseded":
		return schedule.Record{}, schedSuperseded(req.Job, req.Definition)
	}
	return schedule.Record{}, malformed("schedule begin")
}

func (v schedules) Finish(ctx context.Context, req scheddriver.FinishRequest) (schedule.Record, error) {
	if err := req.Validate(); err != nil {
		return schedule.Record{}, err
	}
	s := v.s
	if err := s.ready(ctx); err != nil {
		return schedule.Record{}, v.fail(err)
	}
	k := s.schedKeys(req.Job, req.SlotID)
	retry := strconv.FormatInt(int64((req.RetryAfter+time.Microsecond-1)/time.Microsecond), 10)
	res, p := s.write(ctx, schedFinishScript, []string{k.rec, k.open, k.ledger},
		[]string{req.SlotID, strconv.FormatUint(req.Fence, 10), string(req.State), scheddriver.CutError(req.Error), retry}, false)
	arr, err := res.ToArray()
	if err != nil {
		return schedule.Record{}, v.fail(err)
	}
	st, _, r, err := schedReply(req.Job, req.SlotID, arr, "schedule finish")
	if err != nil {
		return schedule.Record{}, err
	}
	if st != "ok" {
		return schedule.Record{}, schedStale(req.Job, req.SlotID, req.Fence)
	}
	if err := s.confirm(ctx, p); err != nil {
		return schedule.Record{}, v.fail(err)
	}
	return r, nil
}

func (v schedules) Mark(ctx context.Context, req scheddriver.MarkRequest) (schedule.Record, bool, error) {
	if err := req.Validate(); err != nil {
		return schedule.Record{}, false, err
	}
	s := v.s
	if err := s.ready(ctx); err != nil {
		return schedule.Record{}, false, v.fail(err)
	}
	k := s.schedKeys(req.Job, req.SlotID)
	res, p := s.write(ctx, schedMarkScript, []string{k.rec, k.slots, k.def},
		[]string{req.SlotID, usStr(req.SlotTime), string(req.State), req.Node, scheddriver.CutError(req.Reason), req.Definition}, false)
	arr, err := res.ToArray()
	if err != nil {
		return schedule.Record{}, false, v.fail(err)
	}
	st, _, r, err := schedReply(req.Job, req.SlotID, arr, "schedule mark")
	if err != nil {
		return schedule.Record{}, false, err
	}
	if st == "superseded" {
		return schedule.Record{}, false, schedSuperseded(req.Job, req.Definition)
	}
	if st == "wrote" {
		if err := s.confirm(ctx, p); err != nil {
			return schedule.Record{}, false, v.fail(err)
		}
	}
	return r, st == "wrote", nil
}

func (v schedules) Slot(ctx context.Context, job, id string) (schedule.Record, error) {
	if err := scheddriver.ValidateName(job); err != nil {
		return schedule.Record{}, err
	}
	if err := scheddriver.ValidateID(id); err != nil {
		return schedule.Record{}, err
	}
	rs, err := v.records(ctx, job, []string{id})
	if err != nil {
		return schedule.Record{}, err
	}
	if len(rs) == 0 {
		return schedule.Record{}, fmt.Errorf("redisstore: slot %s of %q: %w", id, job, schedule.ErrNotFound)
	}
	return rs[0], nil
}

// records reads the records of ids (skipping missing ones) in one round
// trip.
func (v schedules) records(ctx context.Context, job string, ids []string) ([]schedule.Record, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	s := v.s
	cmds := make([]rclient.Cmd, len(ids))
	for i, id := range ids {
		cmds[i] = rclient.Cmd{Name: "HGETALL", Keys: []string{s.schedKeys(job, id).rec}, ReadOnly: true}
	}
	var out []schedule.Record
	for i, res := range s.c.DoMulti(ctx, cmds...) {
		m, err := res.AsStrMap()
		if err != nil {
			return nil, v.fail(err)
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, schedRecord(job, ids[i], m))
	}
	return out, nil
}

func (v schedules) Slots(ctx context.Context, job string, from, to time.Time, limit int) ([]schedule.Record, error) {
	if err := scheddriver.ValidateName(job); err != nil {
		return nil, err
	}
	s := v.s
	k := s.schedKeys(job, "")
	cmd := rclient.Cmd{Name: "ZRANGE", Keys: []string{k.slots}, Args: []string{usStr(from), "(" + usStr(to), "BYSCORE"}, ReadOnly: true}
	if limit > 0 {
		cmd.Args = append(cmd.Args, "LIMIT", "0", strconv.Itoa(limit))
	}
	ids, err := s.c.Do(ctx, cmd).AsStrSlice()
	if err != nil {
		return nil, v.fail(err)
	}
	return v.records(ctx, job, ids)
}

func (v schedules) Unfinished(ctx context.Context, job string, limit int) ([]schedule.Record, error) {
	if err := scheddriver.ValidateName(job); err != nil {
		return nil, err
	}
	s := v.s
	ids, err := s.c.Do(ctx, rclient.Cmd{Name: "SMEMBERS", Keys: []string{s.schedKeys(job, "").open}, ReadOnly: true}).AsStrSlice()
	if err != nil {
		return nil, v.fail(err)
	}
	rs, err := v.records(ctx, job, ids)
	if err != nil {
		return nil, err
	}
	rs = slices.DeleteFunc(rs, func(r schedule.Record) bool { return r.Final() })
	slices.SortFunc(rs, func(a, b schedule.Record) int { return a.SlotTime.Compare(b.SlotTime) })
	if limit > 0 && len(rs) > limit {
		rs = rs[:limit]
	}
	return rs, nil
}

func (v schedules) Last(ctx context.Context, job string) (time.Time, bool, error) {
	if err := scheddriver.ValidateName(job); err != nil {
		return time.Time{}, false, err
	}
	s := v.s
	arr, err := s.c.Do(ctx, rclient.Cmd{Name: "ZRANGE", Keys: []string{s.schedKeys(job, "").slots},
		Args: []string{"+inf", "-inf", "BYSCORE", "REV", "LIMIT", "0", "1", "WITHSCORES"}, ReadOnly: true}).ToArray()
	if err != nil {
		return time.Time{}, false, v.fail(err)
	}
	if len(arr) == 0 {
		return time.Time{}, false, nil
	}
	// RESP2 replies [member, score]; RESP3 [[member, score]].
	score := arr[len(arr)-1]
	if inner, err := score.ToArray(); err == nil && len(inner) == 2 {
		score = inner[1]
	}
	f, err := score.AsFloat64()
	if err != nil {
		return time.Time{}, false, malformed("last slot")
	}
	return time.UnixMicro(int64(f)), true, nil
}

// schedDef parses a definition hash (fp, spec, node, t).
func schedDef(job string, m map[string]string) schedule.Definition {
	d := schedule.Definition{Job: job, Fingerprint: m["fp"], Spec: m["spec"], Node: m["node"]}
	if n, err := strconv.ParseInt(m["t"], 10, 64); err == nil {
		d.Registered = time.UnixMicro(n)
	}
	return d
}

func (v schedules) Register(ctx context.Context, req scheddriver.RegisterRequest) (schedule.Definition, error) {
	if err := req.Validate(); err != nil {
		return schedule.Definition{}, err
	}
	s := v.s
	if err := s.ready(ctx); err != nil {
		return schedule.Definition{}, v.fail(err)
	}
	res, p := s.write(ctx, schedRegisterScript, []string{s.schedKeys(req.Job, "").def},
		[]string{req.Fingerprint, scheddriver.CutError(req.Spec), req.Node}, false)
	arr, err := res.ToArray()
	if err != nil {
		return schedule.Definition{}, v.fail(err)
	}
	if err := s.confirm(ctx, p); err != nil {
		return schedule.Definition{}, v.fail(err)
	}
	m, err := schedFlat(arr)
	if err != nil {
		return schedule.Definition{}, err
	}
	if len(m) == 0 {
		return schedule.Definition{}, nil
	}
	return schedDef(req.Job, m), nil
}

func (v schedules) Definition(ctx context.Context, job string) (schedule.Definition, error) {
	if err := scheddriver.ValidateName(job); err != nil {
		return schedule.Definition{}, err
	}
	s := v.s
	m, err := s.c.Do(ctx, rclient.Cmd{Name: "HGETALL", Keys: []string{s.schedKeys(job, "").def}, ReadOnly: true}).AsStrMap()
	if err != nil {
		return schedule.Definition{}, v.fail(err)
	}
	if len(m) == 0 {
		return schedule.Definition{}, fmt.Errorf("redisstore: job %q: no registered definition: %w", job, schedule.ErrNotFound)
	}
	return schedDef(job, m), nil
}

// SlotEffect is one change that [Store.CompleteSlot] applies together with
// a slot's completion, to a value of the slot's job (kept under the job's
// hash tag). Make them with SetSlotValue and AddSlotValue.
type SlotEffect struct {
	name, op, arg string
}

// SetSlotValue sets the job's value name to value.
func SetSlotValue(name string, value []byte) SlotEffect {
	return SlotEffect{name: name, op: "set", arg: rueidis.BinaryString(value)}
}

// AddSlotValue adds delta to the job's value name, a decimal integer
// (missing counts as 0).
func AddSlotValue(name string, delta int64) SlotEffect {
	return SlotEffect{name: name, op: "add", arg: strconv.FormatInt(delta, 10)}
}

func (s *Store) schedValueKey(job, name string) string { return s.schedTag(job) + "v:" + escape(name) }

// CompleteSlot is the fenced completion of a slot for effects the store
// holds, in one Lua script judged on the server: if the ledger already has
// (job, slot) it returns an error wrapping schedule.ErrCompleted; if the
// slot's claim is not current (the claim lock does not hold the slot's
// token, or its fence key another fence; the lock expires on the server's
// clock) one wrapping schedule.ErrStale (fence.ErrStale) and
// lease.ErrNotHeld; otherwise it applies effects to the job's values,
// records (job, slot) in the ledger and marks the slot done. Nothing is
// written on a refusal or on bad input (value names follow the rules of
// lease keys; adding to a value that is not an integer is refused before
// any write).
//
// The values live under the job's hash tag, so this works unchanged on
// Redis Cluster; read them with SlotValue.
func (s *Store) CompleteSlot(ctx context.Context, slot *schedule.Slot, effects ...SlotEffect) error {
	if slot == nil || slot.Lease() == nil {
		return fmt.Errorf("%w: redisstore: nil slot or a slot without a claim", schedule.ErrInvalid)
	}
	if err := scheddriver.ValidateName(slot.Job); err != nil {
		return err
	}
	if err := scheddriver.ValidateID(slot.ID); err != nil {
		return err
	}
	for _, e := range effects {
		if err := leasedriver.ValidateKey(e.name); err != nil {
			return fmt.Errorf("%w: redisstore: slot value name: %w", schedule.ErrInvalid, err)
		}
	}
	l := slot.Lease()
	lock, fenceKey, err := s.schedClaimKeys(l.Key())
	if err != nil {
		return err
	}
	if err := s.ready(ctx); err != nil {
		return schedules{s}.fail(err)
	}
	k := s.schedKeys(slot.Job, slot.ID)
	keys := append(make([]string, 0, 6+len(effects)), lock, fenceKey, k.rec, k.ledger, k.open, k.slots)
	args := append(make([]string, 0, 5+2*len(effects)), l.Token().Reveal(), strconv.FormatUint(l.Fence(), 10), slot.ID,
		usStr(slot.Time), strconv.Itoa(slot.Attempt))
	for _, e := range effects {
		keys = append(keys, s.schedValueKey(slot.Job, e.name))
		args = append(args, e.op, e.arg)
	}
	res, p := s.write(ctx, schedCompleteScript, keys, args, false)
	arr, err := res.ToArray()
	if err != nil {
		return schedules{s}.fail(err)
	}
	if len(arr) != 1 {
		return malformed("schedule complete")
	}
	switch st, _ := arr[0].ToString(); st {
	case "ok":
		if err := s.confirm(ctx, p); err != nil {
			return schedules{s}.fail(err)
		}
		return nil
	case "completed":
		return fmt.Errorf("redisstore: slot %s of %q: %w", slot.ID, slot.Job, schedule.ErrCompleted)
	case "stale":
		return fmt.Errorf("redisstore: slot %s of %q: the claim with fence %d is not current: %w (%w)",
			slot.ID, slot.Job, l.Fence(), lease.ErrNotHeld, fence.ErrStale)
	}
	return malformed("schedule complete")
}

// SlotValue returns the job's value name as CompleteSlot left it (nil if
// never set).
func (s *Store) SlotValue(ctx context.Context, job, name string) ([]byte, error) {
	if err := scheddriver.ValidateName(job); err != nil {
		return nil, err
	}
	if err := leasedriver.ValidateKey(name); err != nil {
		return nil, err
	}
	b, err := s.c.Do(ctx, rclient.Cmd{Name: "GET", Keys: []string{s.schedValueKey(job, name)}, ReadOnly: true}).AsBytes()
	if rclient.IsNil(err) {
		return nil, nil
	}
	if err != nil {
		return nil, schedules{s}.fail(err)
	}
	return b, nil
}

// schedClaims is the claims lease store: the store's lease scripts on keys
// in the job's hash tag.
type schedClaims schedules

func (v schedClaims) Acquire(ctx context.Context, key, token string, ttl time.Duration) (lease.Grant, error) {
	if err := leasedriver.Validate(key, token, ttl); err != nil {
		return lease.Grant{}, err
	}
	s := v.s
	lock, fk, err := s.schedClaimKeys(key)
	if err != nil {
		return lease.Grant{}, err
	}
	if err := s.ready(ctx); err != nil {
		return lease.Grant{}, err
	}
	_, ms := s.ttlArg(ttl)
	// Slot claims have no queue of waiters: its keys (in the claim's hash
	// slot) stay empty.
	res, p := s.write(ctx, acquireScript, []string{lock, fk, schedHolderKey(lock), lock + ":queue", lock + ":stays", s.schedFloorKey(key), lock + ":handover"}, []string{token, ms, schedKeep, "", "0", "0", ""}, false)
	arr, err := res.ToArray()
	if err != nil {
		return lease.Grant{}, s.fail(err)
	}
	if len(arr) < 2 {
		return lease.Grant{}, malformed("acquire")
	}
	ok, err1 := arr[0].AsInt64()
	n, err2 := arr[1].AsInt64()
	if err1 != nil || err2 != nil {
		return lease.Grant{}, malformed("acquire")
	}
	if ok == 0 {
		return lease.Grant{}, &lease.HeldError{Key: key, TTL: remaining(n)}
	}
	if len(arr) < 3 || n <= 0 {
		return lease.Grant{}, malformed("acquire")
	}
	granted, err := arr[2].AsInt64()
	if err != nil {
		return lease.Grant{}, malformed("acquire")
	}
	if err := s.confirm(ctx, p); err != nil {
		s.releaseUnconfirmed(ctx, lock, schedHolderKey(lock), token)
		return lease.Grant{}, err
	}
	return lease.Grant{Fence: uint64(n), TTL: time.Duration(granted) * time.Millisecond}, nil
}

func (v schedClaims) Renew(ctx context.Context, key, token string, ttl time.Duration) (lease.Grant, error) {
	if err := leasedriver.Validate(key, token, ttl); err != nil {
		return lease.Grant{}, err
	}
	s := v.s
	lock, fk, err := s.schedClaimKeys(key)
	if err != nil {
		return lease.Grant{}, err
	}
	if err := s.ready(ctx); err != nil {
		return lease.Grant{}, err
	}
	return s.renew(ctx, []string{lock, fk, schedHolderKey(lock)}, token, ttl, schedKeep)
}

func (v schedClaims) Release(ctx context.Context, key, token string) error {
	if err := leasedriver.ValidateKey(key); err != nil {
		return err
	}
	if err := leasedriver.ValidateToken(token); err != nil {
		return err
	}
	s := v.s
	lock, _, err := s.schedClaimKeys(key)
	if err != nil {
		return err
	}
	if err := s.ready(ctx); err != nil {
		return err
	}
	res, p := s.write(ctx, releaseScript, []string{lock, lock + ":queue", lock + ":stays", schedHolderKey(lock), lock + ":fence", lock + ":floor", lock + ":handover"}, []string{token, "", "0", "0", "0"}, false)
	n, err := res.AsInt64()
	if err != nil {
		return s.fail(err)
	}
	if n != 1 {
		return lease.ErrNotHeld
	}
	return s.confirm(ctx, p)
}

func (v schedClaims) Inspect(ctx context.Context, key string) (lease.Info, error) {
	if err := leasedriver.ValidateKey(key); err != nil {
		return lease.Info{}, err
	}
	s := v.s
	lock, fk, err := s.schedClaimKeys(key)
	if err != nil {
		return lease.Info{}, err
	}
	return s.inspectKeys(ctx, key, lock, fk, schedHolderKey(lock))
}
