package viewcache

import (
	"sync"
	"sync/atomic"
	"testing"
)

func TestGetBuildsOnce(t *testing.T) {
	var c Cache
	var builds atomic.Int32
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if v := c.Get("x", func() any { builds.Add(1); return 42 }); v != 42 {
				t.Errorf("Get = %v", v)
			}
		})
	}
	wg.Wait()
	if n := builds.Load(); n != 1 {
		t.Fatalf("built %d times", n)
	}
	if v := c.Get("y", func() any { return "y" }); v != "y" {
		t.Fatalf("Get(y) = %v", v)
	}
}
