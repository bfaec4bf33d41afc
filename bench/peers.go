//go:build peers

// This file pins the peer libraries that the benchmarks of the other
// primitives compare against, so go.mod lists them before their
// benchmarks exist. It is never built.
package bench

import (
	_ "github.com/alexedwards/scs/goredisstore"
	_ "github.com/alexedwards/scs/redisstore"
	_ "github.com/alexedwards/scs/v2"
	_ "github.com/go-redis/redis_rate/v10"
	_ "github.com/ulule/limiter/v3"
	_ "github.com/ulule/limiter/v3/drivers/store/redis"
	_ "golang.org/x/time/rate"
)
