// Package rls serves Envoy's global rate limit service
// (envoy.service.ratelimit.v3.RateLimitService, the API of
// envoyproxy/ratelimit) over gRPC, on any ratelimit.Store: memory, SQLite,
// PostgreSQL or Redis (single node and Cluster).
//
// # Configuration
//
// A [Config] holds domains of nested descriptors in the shape of
// envoyproxy/ratelimit's files: key, optional value (a trailing '*' makes
// it a prefix), rate_limit {name, unit, requests_per_unit, unlimited,
// algorithm, burst}, shadow_mode and descriptors. [Parse] and [ParseYAML]
// read it (an envoyproxy/ratelimit file of one domain as it is), [LoadFile]
// picks by extension, and its JSON tags let a larger JSON configuration
// embed it. [Server.SetConfig] swaps it at run time; a bad one is refused
// and the one in force stays.
//
// # Decisions
//
// A request descriptor's entries walk the domain's tree as in
// envoyproxy/ratelimit (exact value, then wildcard, then the descriptor
// without a value); the rule of the node its last entry reaches applies.
// Every limited descriptor of a request is decided in one atomic store
// call, on the store's clock (up to ratelimit.MaxGroup distinct counters;
// more are decided in several calls): when one enforced limit is over, the
// request is OVER_LIMIT and no limit is charged. Shadow-mode limits count
// but never make a request over limit. hits_addend (the request's, or a
// descriptor's own, where 0 only reads) is the number of units. The state
// of a descriptor is kept under the limit's name and a key built from the
// domain and every entry, escaped as ratelimit.Join escapes and hashed by
// ratelimit.NormalizeKey when not a valid key, so distinct descriptors
// never share a counter.
//
// Statuses come in request order with current_limit, limit_remaining and
// duration_until_reset (until the limit is full again, or, when over,
// until the same request would pass); a descriptor that hits no rule, or an
// unlimited one, is OK with limit_remaining 2^32-1 and no current_limit.
// The x-ratelimit-limit, -remaining and -reset response headers describe
// the enforced descriptor closest to its limit.
//
// # Errors
//
// An empty domain or descriptor list is refused with InvalidArgument (an
// error, as envoyproxy/ratelimit answers); an unknown domain limits
// nothing. A store that cannot be reached makes the call fail with
// Unavailable (DeadlineExceeded when the call's deadline passed first), so
// that Envoy's failure_mode_deny decides; a call never answers OK for a
// store it could not ask.
//
// # Who may call
//
// Every call consumes hits, so whoever reaches the port can use up any
// domain's limits. With Options.Credentials a call must carry a known
// bearer token in its "authorization" metadata (Unauthenticated
// otherwise), allowed the call's domain (PermissionDenied otherwise);
// Serve takes grpc.Creds for TLS and mutual TLS. Every call is bounded
// before anything is decided: Options.MaxDescriptors, MaxEntries and
// MaxMessageBytes (InvalidArgument or ResourceExhausted beyond them).
//
// See docs/envoy.md for the Envoy side and for tenure serve's --rls-addr.
package rls
