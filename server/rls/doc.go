// Package rls serves Envoy's global rate limit service
// (envoy.service.ratelimit.v3.RateLimitService) over gRPC, on any
// ratelimit.Store: memory, SQLite, PostgreSQL or Redis.
//
// See docs/envoy.md for the configuration, the semantics of each request
// field and how tenure serve mounts it.
package rls
