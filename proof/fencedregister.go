package proof

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/jackc/pgx/v5"

	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/internal/storeurl"
	"github.com/tenurekit/tenure/lease"
)

func init() {
	register(&workload{
		name:     "fenced-register",
		summary:  "lease holders write a register through fence admission alone (strict, at-least, then strict again with the same fence, which must be refused), as tenure serve does; a paused holder's write is refused once a newer fence was admitted (a linearizable fenced register)",
		supports: func(storeurl.Kind) string { return "" },
		setup:    counterSetup,
		worker:   fregWorker,
		check:    fregCheck,
		aim:      true,
		aimAt:    []string{"write"},
	})
}

// fregKey names register i of mode (and the lease its writers hold).
func fregKey(w *workerEnv, mode string, i int) string {
	return w.env.Key("fr/" + mode + "/" + strconv.Itoa(i))
}

func fregWorker(ctx context.Context, w *workerEnv) error {
	return perKey(ctx, w, fregKey, fregLoop)
}

// fregValue is what a write puts in the register: the writer's fence, who
// wrote it, a sequence number and the admission mode ("s" strict, "a" at
// least), so that every write's value is unique.
func fregValue(f uint64, proc string, n int, atLeast bool) string {
	m := "s"
	if atLeast {
		m = "a"
	}
	return fmt.Sprintf("%d/%s/%d/%s", f, proc, n, m)
}

// fregAtLeast reports whether a register value was written in at-least
// mode.
func fregAtLeast(v string) bool { return strings.HasSuffix(v, "/a") }

// fregLoop: acquire the lease, read the register, think, write the
// register through strict fence admission (or plainly, in the control),
// write it once more with the same fence through at-least admission
// (where the store has it) and a third time through strict admission
// again, which must refuse the fence it already admitted; release. There
// is no holder check: a holder whose lease expired is refused only once a
// newer fence was admitted. Every write is made whatever the earlier
// ones' outcome, so that each admission mode meets late writes.
func fregLoop(ctx context.Context, w *workerEnv, mode, key string) error {
	lk, err := lease.New(w.env.Leases, &lease.Options{RetryMin: 2 * time.Millisecond, RetryMax: 20 * time.Millisecond, Attempts: 1})
	if err != nil {
		return err
	}
	ttl := w.spec.TTL
	res := key
	seq := 0
	for ctx.Err() == nil {
		w.gate.wait(ctx)
		p := w.rec.Invoke(mode, "acquire", key, "", 0)
		actx, cancel := context.WithTimeout(ctx, 20*ttl)
		l, err := lk.Acquire(actx, key, ttl)
		cancel()
		if err != nil {
			p.End("", 0, err)
			if ctx.Err() != nil {
				return nil
			}
			continue
		}
		p.OK(strconv.FormatInt(l.ValidUntil().UnixNano(), 10), l.Fence())
		w.gate.wait(ctx)
		// The steps after the acquire finish even when the worker is told
		// to stop, so that a stop leaves no write unknown.
		octx, ocancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		rp := w.rec.Invoke(mode, "read", res, "", l.Fence())
		v, err := fregRead(octx, w, mode, res)
		rp.End(v, l.Fence(), err)
		w.sleep(ctx, w.spec.Think)
		// Strict, then at-least with the same fence (etcd has strict
		// admission only), then strict once more with the same fence,
		// which strict admission must refuse: the fence is already
		// admitted.
		modes := []bool{false, true, false}
		if w.kind == storeurl.Etcd {
			modes = []bool{false, false}
		}
		for _, atLeast := range modes {
			seq++
			nv := fregValue(l.Fence(), w.spec.Proc, seq, atLeast)
			wp := w.rec.Invoke(mode, "write", res, nv, l.Fence())
			wp.End(nv, l.Fence(), fregWrite(octx, w, mode, res, l.Fence(), nv, atLeast))
		}
		relp := w.rec.Invoke(mode, "release", key, "", l.Fence())
		relp.End("", l.Fence(), l.Release(octx))
		ocancel()
	}
	return nil
}

// fregRead reads the register: the business table on the SQL stores, the
// fenced value elsewhere (the plain one in the control).
func fregRead(ctx context.Context, w *workerEnv, mode, res string) (string, error) {
	switch w.kind {
	case storeurl.SQLite, storeurl.Postgres:
		return counterRead(ctx, w, res)
	}
	return w.env.Resource.Read(ctx, res)
}

// fregWrite writes v to res with fence f. Guarded: the SQL stores admit
// the fence in the transaction of the write (Admit or AdmitAtLeast, and
// nothing else, as tenure serve's fenced write relies on); Redis and
// memory use FencedSet or FencedSetAtLeast, etcd FencedPut. Control: a
// plain write.
func fregWrite(ctx context.Context, w *workerEnv, mode, res string, f uint64, v string, atLeast bool) error {
	guarded := mode == Guarded
	switch w.kind {
	case storeurl.SQLite:
		s := w.env.SQLite
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if guarded {
			t := s.Tx(tx)
			admit := t.Admit
			if atLeast {
				admit = t.AdmitAtLeast
			}
			if err := admit(ctx, res, f); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+sqliteRegister+` (name, value) VALUES (?, ?)
			ON CONFLICT (name) DO UPDATE SET value = excluded.value`, res, v); err != nil {
			return err
		}
		return tx.Commit()
	case storeurl.Postgres:
		return pgx.BeginFunc(ctx, w.pg, func(tx pgx.Tx) error {
			if guarded {
				t := w.env.PG.PgxTx(tx)
				admit := t.Admit
				if atLeast {
					admit = t.AdmitAtLeast
				}
				if err := admit(ctx, res, f); err != nil {
					return err
				}
			}
			_, err := tx.Exec(ctx, `INSERT INTO `+pgRegister+` (name, value) VALUES ($1, $2)
				ON CONFLICT (name) DO UPDATE SET value = excluded.value`, res, v)
			return err
		})
	}
	if !guarded {
		return w.env.Resource.PlainWrite(ctx, res, v)
	}
	switch {
	case !atLeast:
		return w.env.Resource.FencedWrite(ctx, res, f, v)
	case w.env.Redis != nil:
		return w.env.Redis.FencedSetAtLeast(ctx, res, f, []byte(v))
	case w.env.Mem != nil:
		return w.env.Mem.FencedSetAtLeast(ctx, res, f, []byte(v))
	}
	return fmt.Errorf("proof: no at-least fenced write on %s", w.kind)
}

func fregCheck(ctx context.Context, w *workerEnv, ri *runInfo, h *History, mode string) ModeResult {
	var m ModeResult
	m.countOps(h.Select(mode, "write"))
	lin := true
	for k := range counterKeys(w.spec) {
		key := fregKey(w, mode, k)
		if !fregCheckKey(ctx, w, ri, h, mode, key, k, &m) {
			lin = false
		}
	}
	m.Linearizable = &lin
	return m
}

// fregCheckKey checks register k (named key) of mode into m and reports
// whether its history is linearizable.
func fregCheckKey(ctx context.Context, w *workerEnv, ri *runInfo, h *History, mode, key string, k int, m *ModeResult) bool {
	writes, reads := byKey(h, mode, "write", key), byKey(h, mode, "read", key)
	final, err := fregRead(ctx, w, mode, key)
	if err != nil {
		m.violate("cannot read the final register: %v", err)
		return false
	}
	// The final value must be that of a write that was not refused, with
	// a fence no older than any acknowledged write's.
	var top uint64
	for _, op := range writes {
		if op.Status == OK {
			top = max(top, op.Fence)
		}
	}
	if final != "" || top > 0 {
		found := false
		for _, op := range writes {
			if op.In == final && op.Status != Fail {
				found = true
				if op.Fence < top {
					m.Lost++
					m.violate("the register ends with the value of fence %d, though a write with fence %d was acknowledged", op.Fence, top)
				}
			}
		}
		if !found {
			m.violate("the register ends with %q, which no write that may have applied wrote", final)
		}
	}
	olderFenceAdmitted(writes, m)
	name := ri.name + "-" + mode
	if k > 0 {
		name += "-" + strconv.Itoa(k)
	}
	atLeastMode := func(op Op) bool { return fregAtLeast(op.In) }
	ok, cerr := checkFencedRegister(ri, name, reads, writes, atLeastMode, final, ri.end.UnixNano())
	if !ok {
		m.violate("the register's history is not linearizable as a fenced register (visualization in %s)", ri.dir)
	} else if cerr != nil {
		m.Errors["check:"+cerr.Error()]++
	}
	return ok
}

// olderFenceAdmitted counts, into m, the acknowledged writes whose fence
// is below that of a write acknowledged before they were invoked: what a
// resource-side guard refuses.
func olderFenceAdmitted(writes []Op, m *ModeResult) {
	var acked []Op
	for _, op := range writes {
		if op.Status == OK {
			acked = append(acked, op)
		}
	}
	doneOrder := slices.Clone(acked)
	sort.Slice(doneOrder, func(i, j int) bool { return doneOrder[i].Complete < doneOrder[j].Complete })
	sort.Slice(acked, func(i, j int) bool { return acked[i].Invoke < acked[j].Invoke })
	var wtop uint64
	j := 0
	for _, op := range acked {
		for j < len(doneOrder) && doneOrder[j].Complete < op.Invoke {
			wtop = max(wtop, doneOrder[j].Fence)
			j++
		}
		if op.Fence < wtop {
			m.OlderFenceAdmitted++
			m.violate("a write with fence %d was admitted after one with fence %d had been acknowledged", op.Fence, wtop)
		}
	}
}

// fregInput is an operation on a fenced register: a read, or a write of
// Value with Fence in strict or at-least mode. Unknown marks a write whose
// outcome is unknown.
type fregInput struct {
	Write   bool
	AtLeast bool
	Value   string
	Fence   uint64
	Unknown bool
}

// fregState is the register as the guard must keep it: its value and the
// greatest fence admitted.
type fregState struct {
	Value string
	Fence uint64
}

// fencedRegisterModel is a register behind a max-fence guard: a write is
// admitted (output true) exactly when its fence is greater than the
// greatest admitted one, or equal to it in at-least mode; a refused write
// (output false) changes nothing and must have been refusable; a read
// returns the value of the last admitted write.
var fencedRegisterModel = porcupine.Model{
	Init: func() any { return fregState{} },
	Step: func(state, input, output any) (bool, any) {
		st, in := state.(fregState), input.(fregInput)
		if !in.Write {
			return output.(string) == st.Value, st
		}
		m := fence.Strict
		if in.AtLeast {
			m = fence.AtLeast
		}
		admits := m.Admits(st.Fence, in.Fence)
		if in.Unknown {
			// It may have applied, if admissible, or not at all (the
			// checker may also order it after everything else).
			if admits {
				return true, fregState{Value: in.Value, Fence: in.Fence}
			}
			return true, st
		}
		if output.(bool) {
			return admits, fregState{Value: in.Value, Fence: max(st.Fence, in.Fence)}
		}
		return !admits, st
	},
	DescribeOperation: func(input, output any) string {
		in := input.(fregInput)
		if !in.Write {
			return fmt.Sprintf("read → %q", output.(string))
		}
		m := "strict"
		if in.AtLeast {
			m = "at-least"
		}
		s := fmt.Sprintf("write %q, fence %d (%s)", in.Value, in.Fence, m)
		switch {
		case in.Unknown:
			s += " ?"
		case output.(bool):
			s += " → admitted"
		default:
			s += " → refused"
		}
		return s
	},
	DescribeState: func(state any) string {
		st := state.(fregState)
		return fmt.Sprintf("%q (fence %d)", st.Value, st.Fence)
	},
}

// checkFencedRegister checks one register's reads and writes, and its
// final value read at end, against fencedRegisterModel. Writes refused
// with a stale fence are part of the check (the guard must not refuse an
// admissible fence); writes that failed otherwise took no effect and are
// left out; writes whose outcome is unknown may have applied at any time
// after their invocation.
func checkFencedRegister(ri *runInfo, name string, reads, writes []Op, atLeast func(Op) bool, final string, end int64) (bool, error) {
	client := clientIDs()
	var ops []porcupine.Operation
	for _, r := range reads {
		if r.Status != OK {
			continue
		}
		ops = append(ops, porcupine.Operation{ClientId: client(r.Proc), Input: fregInput{}, Output: r.Out, Call: r.Invoke, Return: r.Complete})
	}
	for _, wr := range writes {
		in := fregInput{Write: true, AtLeast: atLeast(wr), Value: wr.In, Fence: wr.Fence}
		ret, out := wr.Complete, true
		switch wr.Status {
		case Fail:
			if wr.Err != "stale" {
				continue // refused for another reason: no effect, nothing to judge
			}
			out = false
		case Unknown:
			in.Unknown, ret = true, math.MaxInt64
		}
		ops = append(ops, porcupine.Operation{ClientId: client(wr.Proc), Input: in, Output: out, Call: wr.Invoke, Return: ret})
	}
	ops = append(ops, porcupine.Operation{ClientId: client("final read"), Input: fregInput{}, Output: final, Call: end, Return: end + 1})
	return porcupineCheck(ri, name, fencedRegisterModel, ops)
}
