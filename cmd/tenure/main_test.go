package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tenurekit/tenure/lab"
)

func run(args ...string) (string, error) {
	var out bytes.Buffer
	root := newRoot()
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func TestLabCommand(t *testing.T) {
	out, err := run("lab", "--store", "memory", "--only", "lua-release")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "ok   lua-release") || !strings.Contains(out, "luaWrongOwner=0 luaMatchingOwner=1") {
		t.Fatalf("output:\n%s", out)
	}
}

func TestLabList(t *testing.T) {
	out, err := run("lab", "--list")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out, "\n"); n != 3*len(lab.Experiments()) {
		t.Fatalf("%d lines for %d experiments:\n%s", n, len(lab.Experiments()), out)
	}
	for _, e := range lab.Experiments() {
		if e.Shows == "" || !strings.Contains(out, e.Name+"\n    "+e.Shows+"\n    must print: "+e.Want+"\n") {
			t.Errorf("%s is not listed with what it shows and must print:\n%s", e.Name, out)
		}
	}
	for _, word := range []string{"seed", "LeaseTest", "RedisStateTest"} {
		if strings.Contains(strings.ToLower(out), strings.ToLower(word)) {
			t.Errorf("the list mentions %q:\n%s", word, out)
		}
	}
}

func TestLabBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"lab", "--only", "no-such-experiment"},
		{"lab", "--store", "mysql://localhost"},
		{"lab", "--timeout", "0s"},
		{"lab", "extra-arg"},
	} {
		if out, err := run(args...); err == nil {
			t.Errorf("%v succeeded:\n%s", args, out)
		}
	}
}
