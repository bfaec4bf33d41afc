package wakehub

import (
	"fmt"
	"testing"
)

func TestHub(t *testing.T) {
	var h Hub
	a, stopA := h.Watch("k", "")
	b, stopB := h.Watch("k", "")
	other, stopO := h.Watch("other", "")
	defer stopO()
	if n := h.Watchers(); n != 3 {
		t.Fatalf("watchers %d, want 3", n)
	}
	// A full buffer keeps the newest Buffer wake-ups, in order.
	for i := range Buffer + 1 {
		h.Wake("k", fmt.Sprintf("w%d", i))
	}
	for name, ch := range map[string]<-chan string{"a": a, "b": b} {
		for i := 1; i <= Buffer; i++ {
			if got, want := <-ch, fmt.Sprintf("w%d", i); got != want {
				t.Errorf("%s received %q, want %q (the oldest, w0, dropped)", name, got, want)
			}
		}
	}
	select {
	case got := <-other:
		t.Fatalf("another key's watcher received %q", got)
	default:
	}
	stopA()
	stopA() // a second stop does nothing
	h.Wake("k", "w3")
	select {
	case got := <-a:
		t.Fatalf("a stopped watcher received %q", got)
	default:
	}
	if got := <-b; got != "w3" {
		t.Errorf("b received %q, want w3", got)
	}
	stopB()
	if n := h.Watchers(); n != 1 {
		t.Fatalf("watchers %d after two stops, want 1", n)
	}
}

// TestHubNamed: a wake-up naming a waiter reaches that waiter's watchers
// and those watching for any, never another waiter's; one naming none
// reaches all.
func TestHubNamed(t *testing.T) {
	var h Hub
	anyW, stopAny := h.Watch("k", "")
	defer stopAny()
	a1, stopA1 := h.Watch("k", "a")
	a2, stopA2 := h.Watch("k", "a")
	defer stopA2()
	b, stopB := h.Watch("k", "b")
	defer stopB()
	recv := func(ch <-chan string) []string {
		var got []string
		for {
			select {
			case w := <-ch:
				got = append(got, w)
			default:
				return got
			}
		}
	}
	h.Wake("k", "a")
	h.Wake("k", "a/7/2") // a grant for a
	h.Wake("k", "")
	h.Wake("k", "c") // a waiter with no watcher here
	want := map[string][]string{
		"any": {"a", "a/7/2", "", "c"},
		"a1":  {"a", "a/7/2", ""},
		"a2":  {"a", "a/7/2", ""},
		"b":   {""},
	}
	for name, ch := range map[string]<-chan string{"any": anyW, "a1": a1, "a2": a2, "b": b} {
		if got := recv(ch); fmt.Sprint(got) != fmt.Sprint(want[name]) {
			t.Errorf("%s received %q, want %q", name, got, want[name])
		}
	}
	stopA1()
	h.Wake("k", "a")
	if got := recv(a1); len(got) != 0 {
		t.Errorf("a stopped watcher received %q", got)
	}
	if got := recv(a2); fmt.Sprint(got) != "[a]" {
		t.Errorf("a2 received %q after a1 stopped, want [a]", got)
	}
	if n := h.Watchers(); n != 3 {
		t.Fatalf("watchers %d, want 3", n)
	}
	h.WakeAll("b")
	if got := recv(b); fmt.Sprint(got) != "[b]" {
		t.Errorf("b received %q from WakeAll, want [b]", got)
	}
	if got := recv(a2); len(got) != 0 {
		t.Errorf("a2 received %q from WakeAll naming b", got)
	}
}
