package proof

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// wr is a write of value with fence from invoke to complete (ms).
func wr(proc string, fence uint64, value string, invoke, complete int64, st Status, errKind string) Op {
	ms := int64(time.Millisecond)
	return Op{Proc: proc, F: "write", Fence: fence, In: value, Status: st, Err: errKind, Invoke: invoke * ms, Complete: complete * ms}
}

// rd is a read that returned value.
func rd(proc, value string, invoke, complete int64) Op {
	ms := int64(time.Millisecond)
	return Op{Proc: proc, F: "read", Out: value, Status: OK, Invoke: invoke * ms, Complete: complete * ms}
}

func TestCheckFencedRegister(t *testing.T) {
	for _, c := range []struct {
		name   string
		reads  []Op
		writes []Op
		final  string
		ok     bool
	}{
		{"fences rise", []Op{rd("b", "1/a/1/s", 3, 4)},
			[]Op{wr("a", 1, "1/a/1/s", 0, 1, OK, ""), wr("b", 2, "2/b/2/s", 5, 6, OK, "")}, "2/b/2/s", true},
		{"late write refused", nil,
			[]Op{wr("b", 2, "2/b/2/s", 0, 1, OK, ""), wr("a", 1, "1/a/1/s", 5, 6, Fail, "stale")}, "2/b/2/s", true},
		{"late write admitted", nil,
			[]Op{wr("b", 2, "2/b/2/s", 0, 1, OK, ""), wr("a", 1, "1/a/1/s", 5, 6, OK, "")}, "1/a/1/s", false},
		{"strict admits an equal fence", nil,
			[]Op{wr("a", 1, "1/a/1/s", 0, 1, OK, ""), wr("a", 1, "1/a/2/s", 2, 3, OK, "")}, "1/a/2/s", false},
		{"at-least admits an equal fence", nil,
			[]Op{wr("a", 1, "1/a/1/s", 0, 1, OK, ""), wr("a", 1, "1/a/2/a", 2, 3, OK, "")}, "1/a/2/a", true},
		{"at-least refuses an equal fence", nil,
			[]Op{wr("a", 1, "1/a/1/s", 0, 1, OK, ""), wr("a", 1, "1/a/2/a", 2, 3, Fail, "stale")}, "1/a/1/s", false},
		{"strict refuses a newer fence", nil,
			[]Op{wr("a", 1, "1/a/1/s", 0, 1, OK, ""), wr("b", 2, "2/b/2/s", 2, 3, Fail, "stale")}, "1/a/1/s", false},
		{"unknown write may have applied", []Op{rd("b", "2/a/1/s", 5, 6)},
			[]Op{wr("a", 2, "2/a/1/s", 0, 0, Unknown, "timeout")}, "2/a/1/s", true},
		{"unknown write may not have applied", nil,
			[]Op{wr("a", 2, "2/a/1/s", 0, 0, Unknown, "timeout")}, "", true},
		{"the final value is the last admitted", nil,
			[]Op{wr("a", 1, "1/a/1/s", 0, 1, OK, ""), wr("b", 2, "2/b/2/s", 2, 3, OK, "")}, "1/a/1/s", false},
		{"a read of an overwritten value", []Op{rd("c", "1/a/1/s", 4, 5)},
			[]Op{wr("a", 1, "1/a/1/s", 0, 1, OK, ""), wr("b", 2, "2/b/2/s", 2, 3, OK, "")}, "2/b/2/s", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ri := &runInfo{dir: t.TempDir()}
			ok, err := checkFencedRegister(ri, "reg", c.reads, c.writes, func(op Op) bool { return fregAtLeast(op.In) }, c.final, int64(100*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			if ok != c.ok {
				t.Fatalf("linearizable = %v, want %v", ok, c.ok)
			}
			if !ok && len(ri.files) != 1 {
				t.Errorf("files %v, want one visualization", ri.files)
			}
		})
	}
}

// load is a load that returned version and data; save a save of data
// over from that returned version to (or was refused, or is unknown).
func load(proc string, version uint64, data string, invoke, complete int64) Op {
	ms := int64(time.Millisecond)
	return Op{Proc: proc, F: "load", Out: strconv.FormatUint(version, 10) + "/" + data, Status: OK, Invoke: invoke * ms, Complete: complete * ms}
}

func save(proc string, from uint64, data string, to uint64, invoke, complete int64, st Status, errKind string) Op {
	ms := int64(time.Millisecond)
	return Op{Proc: proc, F: "save", In: strconv.FormatUint(from, 10) + "/" + data, Out: strconv.FormatUint(to, 10),
		Status: st, Err: errKind, Invoke: invoke * ms, Complete: complete * ms}
}

// touch is a touch at version at.
func touch(proc string, at uint64, invoke, complete int64, st Status, errKind string) Op {
	ms := int64(time.Millisecond)
	return Op{Proc: proc, F: "touch", In: strconv.FormatUint(at, 10), Status: st, Err: errKind, Invoke: invoke * ms, Complete: complete * ms}
}

func TestCheckVersioned(t *testing.T) {
	for _, c := range []struct {
		name  string
		loads []Op
		saves []Op
		ok    bool
	}{
		{"one save per version", []Op{load("a", 1, "", 0, 1), load("b", 2, "a1", 4, 5)},
			[]Op{save("a", 1, "a1", 2, 2, 3, OK, ""), save("b", 2, "b1", 3, 6, 7, OK, "")}, true},
		{"the second save of a version refused", []Op{load("a", 1, "", 0, 1), load("b", 1, "", 0, 1)},
			[]Op{save("a", 1, "a1", 2, 2, 3, OK, ""), save("b", 1, "b1", 0, 2, 4, Fail, "conflict")}, true},
		{"two saves of one version", []Op{load("a", 1, "", 0, 1), load("b", 1, "", 0, 1)},
			[]Op{save("a", 1, "a1", 2, 2, 3, OK, ""), save("b", 1, "b1", 3, 4, 5, OK, "")}, false},
		{"a save refused over the current version", []Op{load("a", 1, "", 0, 1)},
			[]Op{save("a", 1, "a1", 0, 2, 3, Fail, "conflict")}, false},
		{"a load of an overwritten version", []Op{load("a", 1, "", 0, 1), load("b", 1, "", 4, 5)},
			[]Op{save("a", 1, "a1", 2, 2, 3, OK, "")}, false},
		{"an unknown save may have applied", []Op{load("a", 1, "", 0, 1), load("b", 2, "a1", 6, 7)},
			[]Op{save("a", 1, "a1", 0, 2, 0, Unknown, "timeout")}, true},
		{"an unknown save may not have applied", []Op{load("a", 1, "", 0, 1), load("b", 1, "", 6, 7)},
			[]Op{save("a", 1, "a1", 0, 2, 0, Unknown, "timeout")}, true},
		{"a touch at the current version", []Op{load("a", 1, "", 0, 1)},
			[]Op{save("a", 1, "a1", 2, 2, 3, OK, ""), touch("a", 2, 4, 5, OK, "")}, true},
		{"a touch at an overwritten version refused", []Op{load("a", 1, "", 0, 1), load("b", 1, "", 0, 1)},
			[]Op{save("a", 1, "a1", 2, 2, 3, OK, ""), touch("b", 1, 4, 5, Fail, "conflict")}, true},
		{"a touch at an overwritten version succeeds", []Op{load("a", 1, "", 0, 1), load("b", 1, "", 0, 1)},
			[]Op{save("a", 1, "a1", 2, 2, 3, OK, ""), touch("b", 1, 4, 5, OK, "")}, false},
		{"a touch at the current version refused", []Op{load("a", 1, "", 0, 1)},
			[]Op{touch("a", 1, 2, 3, Fail, "conflict")}, false},
		{"a touch concurrent with the save that replaced its version", []Op{load("a", 1, "", 0, 1), load("b", 1, "", 0, 1)},
			[]Op{save("a", 1, "a1", 2, 2, 5, OK, ""), touch("b", 1, 3, 4, OK, "")}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ri := &runInfo{dir: t.TempDir()}
			ok, err := checkVersioned(ri, "session", c.loads, c.saves)
			if err != nil {
				t.Fatal(err)
			}
			if ok != c.ok {
				t.Fatalf("linearizable = %v, want %v", ok, c.ok)
			}
		})
	}
}

func TestStaleTouches(t *testing.T) {
	saves := []Op{save("a", 1, "a1", 2, 2, 5, OK, ""), save("b", 1, "b1", 0, 2, 6, Fail, "conflict")}
	for _, c := range []struct {
		name  string
		touch Op
		want  int
	}{
		{"the saver touches its new version", touch("a", 2, 6, 7, OK, ""), 0},
		{"the loser's touch refused", touch("b", 1, 7, 8, Fail, "conflict"), 0},
		{"the loser's touch succeeds", touch("b", 1, 7, 8, OK, ""), 1},
		{"a touch sent before the save completed", touch("b", 1, 4, 8, OK, ""), 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if n, msg := staleTouches(saves, []Op{c.touch}); n != c.want {
				t.Fatalf("stale touches = %d (%s), want %d", n, msg, c.want)
			}
		})
	}
}

func TestTakenOver(t *testing.T) {
	ms := int64(time.Millisecond)
	claims := []Op{
		{Proc: "a", F: "claim", Fence: 1, Status: OK, Invoke: 0, Complete: 20 * ms, Out: strconv.FormatInt(8*ms, 10)},
		{Proc: "b", F: "claim", Fence: 2, Status: OK, Invoke: 10 * ms, Complete: 30 * ms, Out: strconv.FormatInt(18*ms, 10)},
	}
	for _, c := range []struct {
		name string
		op   Op
		want bool
	}{
		{"a renews before the takeover", Op{F: "renew", Fence: 1, Status: OK, Invoke: 5 * ms, Complete: 6 * ms}, false},
		{"a's renewal refused after the takeover", Op{F: "renew", Fence: 1, Status: Unknown, Err: "claim-lost", Invoke: 12 * ms, Complete: 13 * ms}, false},
		{"a's renewal accepted after the takeover", Op{F: "renew", Fence: 1, Status: OK, Invoke: 12 * ms, Complete: 13 * ms}, true},
		{"a's result recorded after the takeover", Op{F: "complete", Fence: 1, Status: OK, Invoke: 12 * ms, Complete: 13 * ms}, true},
		{"a's result sent before b's work began", Op{F: "complete", Fence: 1, Status: OK, Invoke: 9 * ms, Complete: 13 * ms}, false},
		{"b completes", Op{F: "complete", Fence: 2, Status: OK, Invoke: 12 * ms, Complete: 13 * ms}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, got := takenOver(c.op, claims); got != c.want {
				t.Fatalf("taken over = %v, want %v", got, c.want)
			}
		})
	}
	if _, _, ok := overlappingClaims(claims); ok {
		t.Error("b's claim began after a's validity: reported as overlapping")
	}
	early := append(claims[:1:1], Op{Proc: "c", F: "claim", Fence: 3, Status: OK, Invoke: 5 * ms, Complete: 6 * ms, Out: "0"})
	if _, b, ok := overlappingClaims(early); !ok || b.Proc != "c" {
		t.Error("c's claim began inside a's validity, while a worked: not reported")
	}
	// d was granted before a (its fence is smaller) and recorded late, as a
	// worker paused between its grant and the record does.
	late := append(claims[:1:1], Op{Proc: "d", F: "claim", Fence: 0, Status: OK, Invoke: 5 * ms, Complete: 6 * ms, Out: "0"})
	if _, _, ok := overlappingClaims(late); ok {
		t.Error("d's claim, granted before a's and recorded late: reported as overlapping")
	}
	after := append(claims[:1:1], Op{Proc: "c", F: "claim", Fence: 2, Status: OK, Invoke: 21 * ms, Complete: 22 * ms, Out: "0"})
	if _, _, ok := overlappingClaims(after); ok {
		t.Error("c's claim began after a's work was over: reported")
	}
	if got := effectOf(answer("w1/7/a", 9)); got != "w1/7/a" {
		t.Errorf("effectOf(answer) = %q", got)
	}
	if got := fingerprintOf(answer("w1/7/b", 9)); got != "b" {
		t.Errorf("fingerprintOf(answer) = %q", got)
	}
}

func TestAdmittedAfterTakeover(t *testing.T) {
	acquires := []Op{acq("a", 1, 0, 1, 100), acq("b", 2, 100, 110, 210)}
	for _, c := range []struct {
		name  string
		write Op
		want  int
	}{
		{"the holder writes in its tenure", wr("a", 1, "1", 50, 60, OK, ""), 0},
		{"the old holder's write invoked before the next grant completed", wr("a", 1, "1", 105, 120, OK, ""), 0},
		{"the old holder's write invoked after the next grant", wr("a", 1, "1", 111, 120, OK, ""), 1},
		{"the old holder's late write refused", wr("a", 1, "1", 111, 120, Fail, "not-held"), 0},
		{"the new holder writes", wr("b", 2, "2", 111, 120, OK, ""), 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			var m ModeResult
			admittedAfterTakeover([]Op{c.write}, acquires, &m)
			if m.Count != c.want || m.StaleAdmitted != c.want {
				t.Errorf("violations %d, stale %d, want %d: %v", m.Count, m.StaleAdmitted, c.want, m.Violations)
			}
		})
	}
}

func TestCheckRecord(t *testing.T) {
	do := func(proc, answer string, invoke, complete int64) Op {
		ms := int64(time.Millisecond)
		return Op{Proc: proc, F: "do", Out: answer, Status: OK, Invoke: invoke * ms, Complete: complete * ms}
	}
	eff := func(proc, value string, invoke, complete int64, st Status) Op {
		ms := int64(time.Millisecond)
		return Op{Proc: proc + "/effect", F: "effect", In: value, Status: st, Invoke: invoke * ms, Complete: complete * ms}
	}
	for _, c := range []struct {
		name    string
		dos     []Op
		effects []Op
		ok      bool
	}{
		{"one effect, answered and replayed", []Op{do("a", "a/1", 0, 5), do("b", "a/1", 6, 7)}, []Op{eff("a", "a/1", 2, 3, OK)}, true},
		{"a stale effect refused", []Op{do("b", "b/2", 0, 9)}, []Op{eff("a", "a/1", 1, 8, Fail), eff("b", "b/2", 2, 3, OK)}, true},
		{"two effects", []Op{do("a", "a/1", 0, 5)}, []Op{eff("a", "a/1", 1, 2, OK), eff("b", "b/2", 3, 4, OK)}, false},
		{"an answer without its effect", []Op{do("a", "a/1", 0, 5)}, nil, false},
		{"an answer before its effect", []Op{do("a", "b/2", 0, 1)}, []Op{eff("b", "b/2", 2, 3, OK)}, false},
		{"two answers", []Op{do("a", "a/1", 0, 5), do("b", "b/2", 6, 7)}, []Op{eff("a", "a/1", 1, 2, OK)}, false},
		{"an unknown second effect that did not apply", []Op{do("a", "a/1", 0, 5)}, []Op{eff("a", "a/1", 1, 2, OK), eff("b", "b/2", 3, 0, Unknown)}, true},
		{"an unknown effect answered", []Op{do("b", "a/1", 6, 7)}, []Op{eff("a", "a/1", 1, 0, Unknown)}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ri := &runInfo{dir: t.TempDir()}
			ok, err := checkRecord(ri, "record", c.dos, c.effects)
			if err != nil {
				t.Fatal(err)
			}
			if ok != c.ok {
				t.Fatalf("linearizable = %v, want %v", ok, c.ok)
			}
		})
	}
}

func TestPermitCheck(t *testing.T) {
	ms := int64(time.Millisecond)
	ttl := 100 * time.Millisecond
	acquire := func(proc string, invoke, complete int64, st Status) Op {
		return Op{Proc: proc, Mode: Guarded, F: "acquire", In: "0", Status: st, Invoke: invoke * ms, Complete: complete * ms}
	}
	release := func(proc string, invoke int64) Op {
		return Op{Proc: proc, Mode: Guarded, F: "release", In: "0", Status: OK, Invoke: invoke * ms, Complete: (invoke + 1) * ms}
	}
	for _, c := range []struct {
		name string
		ops  []Op
		want int
	}{
		{"two holders at once", []Op{acquire("a", 0, 1, OK), acquire("b", 0, 2, OK)}, 0},
		{"three holders at once", []Op{acquire("a", 0, 1, OK), acquire("b", 0, 2, OK), acquire("c", 3, 4, OK)}, 1},
		{"a permit released before the third grant", []Op{acquire("a", 0, 1, OK), release("a", 3), acquire("b", 0, 2, OK), acquire("c", 3, 4, OK)}, 0},
		{"a paused holder's permit expired", []Op{acquire("a", 0, 1, OK), acquire("b", 0, 2, OK), acquire("c", 100, 101, OK), release("a", 150)}, 0},
		{"a permit that has not expired yet", []Op{acquire("a", 0, 1, OK), acquire("b", 0, 2, OK), acquire("c", 90, 91, OK), release("a", 150)}, 1},
		{"an acquire of unknown outcome", []Op{acquire("a", 0, 1, OK), acquire("b", 0, 2, OK), acquire("c", 3, 0, Unknown)}, 0},
		{"a refused acquire", []Op{acquire("a", 0, 1, OK), acquire("b", 0, 2, OK), acquire("c", 3, 4, Fail)}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := permitCheck(context.Background(), nil, &runInfo{ttl: ttl}, &History{Ops: c.ops}, Guarded)
			if m.Count != c.want {
				t.Errorf("violations %d, want %d: %v", m.Count, c.want, m.Violations)
			}
		})
	}
}
