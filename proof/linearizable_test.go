package proof

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// acq is a granted acquire from invoke to complete (ms), valid until
// valid (ms).
func acq(proc string, fence uint64, invoke, complete, valid int64) Op {
	ms := int64(time.Millisecond)
	return Op{Proc: proc, F: "acquire", Fence: fence, Status: OK, Invoke: invoke * ms, Complete: complete * ms, Out: strconv.FormatInt(valid*ms, 10)}
}

func ren(proc string, fence uint64, invoke, complete, valid int64) Op {
	o := acq(proc, fence, invoke, complete, valid)
	o.F = "renew"
	return o
}

func rel(proc string, fence uint64, invoke, complete int64, st Status) Op {
	ms := int64(time.Millisecond)
	return Op{Proc: proc, F: "release", Fence: fence, Status: st, Invoke: invoke * ms, Complete: complete * ms}
}

func TestCheckLease(t *testing.T) {
	for _, c := range []struct {
		name     string
		acquires []Op
		releases []Op
		ok       bool
		renewals []Op
	}{
		{"one after the other", []Op{acq("a", 1, 0, 1, 100), acq("b", 2, 2, 3, 103)}, []Op{rel("a", 1, 1, 2, OK)}, true, nil},
		{"after expiry", []Op{acq("a", 1, 0, 1, 100), acq("b", 2, 50, 101, 200)}, nil, true, nil},
		{"refused release then expiry", []Op{acq("a", 1, 0, 1, 100), acq("b", 2, 150, 151, 250)}, []Op{rel("a", 1, 160, 161, Fail)}, true, nil},
		{"release refused after a retry may have applied", []Op{acq("a", 1, 0, 1, 100), acq("a", 2, 30, 31, 131)}, []Op{rel("a", 1, 10, 20, Fail)}, true, nil},
		{"a refused release ends only its own tenure", []Op{acq("a", 1, 0, 1, 100), acq("b", 2, 150, 151, 250), acq("c", 3, 170, 171, 270)},
			[]Op{rel("a", 1, 160, 161, Fail)}, false, nil},
		{"unknown release may have applied", []Op{acq("a", 1, 0, 1, 100), acq("b", 2, 5, 6, 106)}, []Op{rel("a", 1, 2, 0, Unknown)}, true, nil},
		{"two holders at once", []Op{acq("a", 1, 0, 1, 100), acq("b", 2, 10, 11, 110)}, nil, false, nil},
		{"fence went back", []Op{acq("a", 5, 0, 1, 100), acq("b", 3, 2, 3, 103)}, []Op{rel("a", 5, 1, 2, OK)}, false, nil},
		{"release of an old tenure leaves the new holder", []Op{acq("a", 1, 0, 1, 100), acq("b", 2, 150, 151, 250), acq("c", 3, 170, 171, 270)},
			[]Op{rel("a", 1, 160, 161, OK)}, false, nil},
		{"unknown acquire may not have applied", []Op{{Proc: "a", F: "acquire", Status: Unknown, Invoke: 0}, acq("b", 2, 10, 11, 110)}, nil, true, nil},
		{"unknown release applied late", []Op{acq("a", 1, 0, 1, 100), acq("b", 2, 40, 41, 140)}, []Op{rel("a", 1, 2, 3, Unknown)}, true, nil},
		{"renewal by the holder extends its tenure", []Op{acq("a", 1, 0, 1, 100), acq("b", 2, 150, 151, 250)}, nil, false, []Op{ren("a", 1, 90, 91, 190)}},
		{"renewal by the holder, then expiry", []Op{acq("a", 1, 0, 1, 100), acq("b", 2, 200, 201, 300)}, nil, true, []Op{ren("a", 1, 90, 91, 190)}},
		{"renewal of a tenure taken over", []Op{acq("a", 1, 0, 1, 100), acq("b", 2, 110, 111, 210)}, nil, false, []Op{ren("a", 1, 150, 151, 250)}},
		{"refused renewal of a tenure taken over", []Op{acq("a", 1, 0, 1, 100), acq("b", 2, 110, 111, 210)}, nil, true, []Op{{Proc: "a", F: "renew", Fence: 1, Status: Fail, Invoke: 150, Complete: 151}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ri := &runInfo{dir: t.TempDir(), ttl: 100 * time.Millisecond}
			ok, err := checkLease(ri, "lease", c.acquires, c.renewals, c.releases)
			if err != nil {
				t.Fatal(err)
			}
			if ok != c.ok {
				t.Fatalf("linearizable = %v, want %v", ok, c.ok)
			}
			if ok {
				if len(ri.files) != 0 {
					t.Errorf("files %v written for a linearizable history", ri.files)
				}
				return
			}
			if len(ri.files) != 1 || !strings.HasSuffix(ri.files[0], "lease.html") {
				t.Fatalf("files %v, want the visualization lease.html", ri.files)
			}
			b, err := os.ReadFile(ri.files[0])
			if err != nil || !strings.Contains(string(b), "acquire") {
				t.Errorf("visualization: %d bytes, %v", len(b), err)
			}
		})
	}
}
