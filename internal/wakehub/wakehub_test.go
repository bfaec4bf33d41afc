package wakehub

import (
	"fmt"
	"testing"
)

func TestHub(t *testing.T) {
	var h Hub
	a, stopA := h.Watch("k")
	b, stopB := h.Watch("k")
	other, stopO := h.Watch("other")
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
