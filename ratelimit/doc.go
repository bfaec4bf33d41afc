// Package ratelimit limits how often (Limiter, Group) and how many at once
// (Concurrency) something may happen per key, across every instance of a
// service that shares a store: memory, SQLite, PostgreSQL or Redis (single
// node and Cluster).
//
// # Rate limits
//
// A [Limit] is Rate units per Period (and, for GCRA, a Burst). [New]
// validates it before anything can be written and returns a [Limiter]
// that enforces it with one of four algorithms:
//
//   - [GCRA] (the default): a token bucket kept as one timestamp. Exact,
//     constant state, exact RetryAfter.
//   - [FixedWindow]: Rate per window, the window starting with the first
//     request. Up to twice Rate around a window boundary.
//   - [SlidingLog]: at most Rate in every interval of Period, exactly; one
//     entry per admitted unit (Rate up to MaxLogRate).
//   - [SlidingWindow]: the sliding window counter (two buckets, the
//     previous one weighted), constant state, approximate.
//
// [Limiter.AllowN] judges and consumes in one atomic step on the store's
// clock (one round trip on Redis and PostgreSQL) and returns a [Decision]:
// Allowed, Remaining, RetryAfter (exact: when the same request would pass)
// and ResetAfter. [Limiter.Peek] answers the same question without
// consuming anything; [Limiter.Reset] forgets a key. A [Group] checks
// several limits (a per-user and a global one, say) all or nothing in one
// step: a request denied by one limit is charged to none.
//
// Time is the store's: Redis TIME, PostgreSQL clock_timestamp(), the clock
// of the process that owns a SQLite file or memory store. Callers' clocks
// play no part in a decision, so callers with skewed clocks get the same
// answers. Every piece of state a store writes carries an expiry (a key TTL,
// or an expiry column that reads judge and a sweep deletes), also when a
// call fails halfway.
//
// # Concurrency limits
//
// [Concurrency] hands out at most Permits permits per key. A [Permit] is a
// lease kept by the store: it expires by itself when its holder dies
// (after the limit's TTL), can be renewed, and is released explicitly.
// [Concurrency.TryAcquire] fails fast with a [LimitedError];
// [Concurrency.Acquire] waits until a permit frees up or ctx ends;
// [Concurrency.Do] keeps the permit alive while a function runs. Each
// permit carries a fence, strictly greater than every fence granted on the
// key before it, which a protected resource can check.
//
// # HTTP
//
// [Middleware] applies limits to HTTP requests by client IP (IPv6 folded to
// its /64, proxies trusted only when configured), by header, user or
// route. Refused requests get 429 with an integer Retry-After and an
// application/problem+json body; responses carry the RateLimit-Policy and
// RateLimit fields of the IETF draft (draft-ietf-httpapi-ratelimit-headers).
// When the store cannot be reached, the failure policy decides: fail closed
// (the default, 503), fail open, or a local in-process limiter at a stated
// share of each limit. Keys that are not valid as-is are hashed
// ([NormalizeKey]), so every request is limited; an invalid request is
// never mistaken for an outage.
//
// # Errors
//
// Bad limits, keys and costs wrap [ErrInvalid] and write nothing. A store
// that cannot be reached yields [ErrUnavailable], never "allowed".
//
// # Stores
//
// Stores implement [Store]; memstore, sqlitestore, pgstore and redisstore
// return one from their Limits method. What only store writers need (the
// contract's request and state types, the checks, the reference engine)
// is in package ratelimit/driver. etcd is not supported: every
// decision is a write, and a Raft commit (with its fsync) per request is
// the wrong tool for a check that runs on every request. The conformance
// suite in ratelimittest checks every store against memstore as the model.
package ratelimit
