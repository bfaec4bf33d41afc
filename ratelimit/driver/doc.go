// Package driver is for store writers; applications use package ratelimit.
//
// It holds the contract between package ratelimit and the stores that keep
// rate limit state (memstore, sqlitestore, pgstore, redisstore, or one of
// your own): the Store interface and the values that cross it (StateKey,
// Request, Decision, PermitGrant), the checks every store runs before its
// first write (ValidateRequests, ValidateStateKeys, ValidatePermit), and
// the reference implementation of the algorithms (Evaluate and its
// siblings, on the State an in-process store keeps).
//
// The types an application also sees (Limit, Algorithm, Decision, Store)
// are defined here and re-exported by package ratelimit under the same
// names, so a value of either is a value of the other. Errors returned by
// the checks here wrap ErrInvalid, which is ratelimit.ErrInvalid.
package driver
