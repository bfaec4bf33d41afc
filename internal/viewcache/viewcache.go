// Package viewcache holds per-primitive state of a store (prepared
// statements, scripts, in-memory maps), built once on first use, so each
// primitive keeps its state in its own file of the store's package.
package viewcache

import "sync"

// Cache maps a primitive's name to its state. The zero value is ready to
// use; it is safe for concurrent use.
type Cache struct {
	mu sync.Mutex
	m  map[string]any
}

// Get returns the value registered under name, building it once.
func (c *Cache) Get(name string, build func() any) any {
	c.mu.Lock()
	defer c.mu.Unlock()
	if x, ok := c.m[name]; ok {
		return x
	}
	if c.m == nil {
		c.m = map[string]any{}
	}
	x := build()
	c.m[name] = x
	return x
}
