package limitmem

import (
	"testing"
	"time"
)

// TestWallClock: the engine's default clock reads the wall clock as
// time.Now does, to within the time between the reads.
func TestWallClock(t *testing.T) {
	var c wallClock
	for i := range 20_000 {
		before := time.Now()
		got := c.now()
		after := time.Now()
		// Microsecond slack: the monotonic clock may run a little apart
		// from the wall clock between rebases.
		if got.Before(before.Add(-time.Microsecond)) || got.After(after.Add(time.Microsecond)) {
			t.Fatalf("read %d: %v, not within [%v, %v]", i, got, before, after)
		}
		if i%5000 == 0 {
			time.Sleep(2 * clockRebase) // a rebase
		}
	}
}
