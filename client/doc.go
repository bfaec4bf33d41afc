// Package client is a Go client of tenure serve whose views implement the
// primitives' store contracts over the HTTP API: Leases (lease.Store and
// lease.Lister), Idempotency (idempotency.Store), Limits (ratelimit.Store)
// and Sessions (session.Store). A Locker, Keeper, Limiter or Manager made
// on a view works as on any store, with the server's store deciding:
//
//	c, err := client.New("http://127.0.0.1:7070", &client.Options{Token: tok})
//	locker, err := lease.New(c.Leases(), nil)
//
// Errors are the primitives' own: a problem the server answers with
// unwraps to the error its type stands for (a *Error gives the details),
// and a request that got no answer wraps the primitive's ErrUnavailable
// (the outcome of a write is then unknown; every write is idempotent per
// token, so it can be sent again). The bearer token is never printed.
//
// Many concurrent callers share round trips: while Options.MaxInFlight
// requests are in flight, the calls made meanwhile queue, and each request
// that ends sends what has queued in one batch request (POST /v1/batch),
// each call still with its own answer and error. A lone caller's call goes
// at once on a request of its own.
package client
