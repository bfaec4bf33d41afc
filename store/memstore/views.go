package memstore

import "github.com/tenurekit/tenure/internal/viewcache"

// views holds the per-primitive state of a Store, built on first use by
// each primitive's own file through Store.view.
type views struct{ cache viewcache.Cache }

// view returns the state registered under name, building it once.
func (v *views) view(name string, build func() any) any { return v.cache.Get(name, build) }
