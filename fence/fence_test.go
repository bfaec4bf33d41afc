package fence_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/tenurekit/tenure/fence"
)

func TestModeAdmits(t *testing.T) {
	cases := []struct {
		m                 fence.Mode
		current, incoming uint64
		want              bool
	}{
		{fence.Strict, 0, 1, true},
		{fence.Strict, 5, 5, false},
		{fence.Strict, 5, 4, false},
		{fence.Strict, 5, 6, true},
		{fence.AtLeast, 5, 5, true},
		{fence.AtLeast, 5, 4, false},
		{fence.AtLeast, 5, 6, true},
	}
	for _, c := range cases {
		if got := c.m.Admits(c.current, c.incoming); got != c.want {
			t.Errorf("%v.Admits(%d, %d) = %v, want %v", c.m, c.current, c.incoming, got, c.want)
		}
	}
}

func TestStaleError(t *testing.T) {
	err := fmt.Errorf("write: %w", &fence.StaleError{Resource: "r", Fence: 3, Current: 7})
	if !errors.Is(err, fence.ErrStale) {
		t.Fatal("StaleError is not ErrStale")
	}
	if got := err.Error(); got != `write: fence: stale fence 3 for "r" (admitted 7)` {
		t.Fatalf("message %q", got)
	}
}
