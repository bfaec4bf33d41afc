package proof

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// regInput is an operation on the counter register: a read, or a write
// of To that was computed from a read of From (a compare-and-set in
// effect: it is correct only if the register still held From).
type regInput struct {
	Write    bool
	From, To int
	Unknown  bool // a write whose outcome is unknown
}

// registerModel is the counter register as a lease and its guard must make
// it look: every acknowledged write replaces exactly the value it read.
var registerModel = porcupine.Model{
	Init: func() any { return 0 },
	Step: func(state, input, output any) (bool, any) {
		st, in := state.(int), input.(regInput)
		if !in.Write {
			return output.(int) == st, st
		}
		if st == in.From {
			return true, in.To
		}
		// An unknown write that did not apply leaves the state as it was;
		// the checker may also order it after everything else.
		return in.Unknown, st
	},
	DescribeOperation: func(input, output any) string {
		in := input.(regInput)
		if !in.Write {
			return fmt.Sprintf("read → %d", output.(int))
		}
		s := fmt.Sprintf("write %d (read %d)", in.To, in.From)
		if in.Unknown {
			s += " ?"
		}
		return s
	},
	DescribeState: func(state any) string { return strconv.Itoa(state.(int)) },
}

// checkRegister checks the reads and writes of one counter for
// linearizability. A failing history is visualized into ri.dir; the
// file's path is added to ri.files.
func checkRegister(ri *runInfo, name string, reads, writes []Op) (ok bool, err error) {
	client := clientIDs()
	var ops []porcupine.Operation
	for _, r := range reads {
		if r.Status != OK {
			continue
		}
		n, _ := parseCount(r.Out)
		ops = append(ops, porcupine.Operation{ClientId: client(r.Proc), Input: regInput{}, Output: n, Call: r.Invoke, Return: r.Complete})
	}
	for _, w := range writes {
		if w.Status == Fail {
			continue // refused: it took no effect
		}
		to, _ := parseCount(w.In)
		in := regInput{Write: true, From: to - 1, To: to, Unknown: w.Status == Unknown}
		ret := w.Complete
		if w.Status == Unknown {
			ret = math.MaxInt64 // may take effect at any later time
		}
		ops = append(ops, porcupine.Operation{ClientId: client(w.Proc), Input: in, Output: 0, Call: w.Invoke, Return: ret})
	}
	return porcupineCheck(ri, name, registerModel, ops)
}

// porcupineCheck checks ops against model. A failing history is
// visualized into ri.dir as NAME.html, whose path is added to ri.files. A
// check that times out counts as passed, with an error saying so.
func porcupineCheck(ri *runInfo, name string, model porcupine.Model, ops []porcupine.Operation) (bool, error) {
	timeout := ri.checkTimeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	res, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
	switch res {
	case porcupine.Ok:
		return true, nil
	case porcupine.Unknown:
		return true, fmt.Errorf("the linearizability check timed out")
	}
	if err := os.MkdirAll(ri.dir, 0o755); err == nil {
		path := filepath.Join(ri.dir, name+".html")
		if err := porcupine.VisualizePath(model, info, path); err == nil {
			ri.files = append(ri.files, path)
		}
	}
	return false, nil
}

// leaseInput is an operation on one lease: an acquire that was granted
// Fence (valid until ValidUntil, Unix nanoseconds: the store cannot have
// let it expire before), a renewal of the tenure with Fence that
// succeeded (valid until ValidUntil after it), or a release of the tenure
// with Fence. Return is the latest the operation can have taken effect;
// Unknown marks a release whose outcome is unknown.
type leaseInput struct {
	Release    bool
	Renew      bool
	Fence      uint64
	ValidUntil int64
	Return     int64
	Unknown    bool
}

// leaseState is the lease as the store must keep it: the fence of its
// holder (0: free), until when that holder's tenure cannot have expired,
// and the greatest fence granted.
type leaseState struct {
	Holder     uint64
	ValidUntil int64
	Last       uint64
}

// leaseModel is a lease with fencing tokens. Acquire succeeds only when
// the lease is free, released, or its holder's tenure may have expired
// (expiry is not an operation of its own: a tenure may end at any time
// after its validity, so an acquire that completes after it may take the
// lease), and it grants a fence greater than every fence before. A
// renewal succeeds only for the current holder's tenure and extends it.
// Release ends the tenure it names and leaves a later holder alone.
var leaseModel = porcupine.Model{
	Init: func() any { return leaseState{} },
	Step: func(state, input, output any) (bool, any) {
		st, in := state.(leaseState), input.(leaseInput)
		if in.Renew {
			if st.Holder != in.Fence {
				return false, st // a tenure that ended, or another's, renewed
			}
			st.ValidUntil = max(st.ValidUntil, in.ValidUntil)
			return true, st
		}
		if in.Release {
			if st.Holder == in.Fence {
				st.Holder, st.ValidUntil = 0, 0
			}
			return true, st // releasing a tenure that already ended does nothing
		}
		free := st.Holder == 0 || in.Return >= st.ValidUntil
		if !free || in.Fence <= st.Last {
			return false, st
		}
		return true, leaseState{Holder: in.Fence, ValidUntil: in.ValidUntil, Last: in.Fence}
	},
	DescribeOperation: func(input, output any) string {
		in := input.(leaseInput)
		if in.Renew {
			return fmt.Sprintf("renew fence %d → valid until %s", in.Fence, time.Unix(0, in.ValidUntil).Format("15:04:05.000"))
		}
		if !in.Release {
			return fmt.Sprintf("acquire → fence %d, valid until %s", in.Fence, time.Unix(0, in.ValidUntil).Format("15:04:05.000"))
		}
		s := fmt.Sprintf("release fence %d", in.Fence)
		if in.Unknown {
			s += " ?"
		}
		return s
	},
	DescribeState: func(state any) string {
		st := state.(leaseState)
		if st.Holder == 0 {
			return fmt.Sprintf("free (last fence %d)", st.Last)
		}
		return fmt.Sprintf("held by fence %d until %s", st.Holder, time.Unix(0, st.ValidUntil).Format("15:04:05.000"))
	},
}

// checkLease checks the acquires, renewals and releases of one lease for
// linearizability against leaseModel. Refused acquires and renewals took
// no effect and are left out. So are acquires and renewals whose outcome is
// unknown: in the model one only ever forbids later grants, so the check
// may always take it as never applied. A release whose outcome is unknown may have taken
// effect until a TTL after its caller gave up (or at any time, if its
// worker was killed first).
func checkLease(ri *runInfo, name string, acquires, renewals, releases []Op) (bool, error) {
	client := clientIDs()
	var ops []porcupine.Operation
	for _, group := range [][]Op{acquires, renewals} {
		for _, a := range group {
			if a.Status != OK {
				continue
			}
			in := leaseInput{Renew: a.F == "renew", Fence: a.Fence, Return: a.Complete}
			in.ValidUntil, _ = strconv.ParseInt(a.Out, 10, 64)
			ops = append(ops, porcupine.Operation{ClientId: client(a.Proc), Input: in, Call: a.Invoke, Return: in.Return})
		}
	}
	for _, r := range releases {
		in := leaseInput{Release: true, Fence: r.Fence, Return: r.Complete}
		switch r.Status {
		case Fail:
			// A refused release may still have ended its tenure: the
			// Locker sends it again after a lost reply, and the second
			// attempt is refused because the first one applied. It can
			// only end its own tenure, so the check takes it as a release
			// that may have applied before it returned.
			in.Unknown = true
		case Unknown:
			in.Unknown, in.Return = true, math.MaxInt64
			if r.Complete != 0 {
				in.Return = r.Complete + ri.ttl.Nanoseconds()
			}
		}
		ops = append(ops, porcupine.Operation{ClientId: client(r.Proc), Input: in, Call: r.Invoke, Return: in.Return})
	}
	return porcupineCheck(ri, name, leaseModel, ops)
}

// parseCount reads "N/FENCE" (or "") as N and FENCE.
func parseCount(v string) (int, uint64) {
	if v == "" {
		return 0, 0
	}
	a, b, _ := strings.Cut(v, "/")
	n, _ := strconv.Atoi(a)
	f, _ := strconv.ParseUint(b, 10, 64)
	return n, f
}

func formatCount(n int, f uint64) string { return strconv.Itoa(n) + "/" + strconv.FormatUint(f, 10) }

// clientIDs returns a function that numbers the processes of a history
// (porcupine's client IDs) in the order it first sees them.
func clientIDs() func(proc string) int {
	ids := map[string]int{}
	return func(p string) int {
		if id, ok := ids[p]; ok {
			return id
		}
		ids[p] = len(ids)
		return ids[p]
	}
}
