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
func checkRegister(ri *runInfo, mode string, reads, writes []Op) (ok bool, err error) {
	clients := map[string]int{}
	client := func(p string) int {
		if id, ok := clients[p]; ok {
			return id
		}
		clients[p] = len(clients)
		return clients[p]
	}
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
	res, info := porcupine.CheckOperationsVerbose(registerModel, ops, time.Minute)
	switch res {
	case porcupine.Ok:
		return true, nil
	case porcupine.Unknown:
		return true, fmt.Errorf("the linearizability check timed out")
	}
	if err := os.MkdirAll(ri.dir, 0o755); err == nil {
		path := filepath.Join(ri.dir, ri.name+"-"+mode+".html")
		if err := porcupine.VisualizePath(registerModel, info, path); err == nil {
			ri.files = append(ri.files, path)
		}
	}
	return false, nil
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
