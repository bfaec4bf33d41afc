package etcdstore

import "sync"

// views holds the per-primitive state of a Store (prepared statements,
// scripts, in-memory maps), built on first use by each primitive's own
// file through Store.view.
type views struct {
	mu sync.Mutex
	m  map[string]any
}

// view returns the value registered under name, building it once.
func (v *views) view(name string, build func() any) any {
	v.mu.Lock()
	defer v.mu.Unlock()
	if x, ok := v.m[name]; ok {
		return x
	}
	if v.m == nil {
		v.m = map[string]any{}
	}
	x := build()
	v.m[name] = x
	return x
}
