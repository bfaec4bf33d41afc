// Package idempotency makes a retried request take effect once: the first
// call with a given key runs the work and records its result, and every
// later call with the same key gets that result back, marked as replayed.
//
// # Identity
//
// A record is identified by a scope (the principal and the operation, e.g.
// "user:42 POST /charges") and the client's key (1 to 255 printable ASCII
// bytes). Equal keys in different scopes never meet. A fingerprint, a
// digest of the request's input (see [Fingerprint]), detects a key reused
// for other input: that call gets [ErrMismatch] and does not run.
//
// # Claims are fenced leases
//
// [Keeper.Do] first claims the record in one atomic step on the store: the
// claim has a random token, a time to live on the store's clock
// (Options.ClaimTTL) and a fence strictly greater than every earlier
// claim's on the record. While fn runs, Do renews the claim every third of
// its TTL; fn's context is cancelled when the claim is lost or its
// validity (measured on the client's monotonic clock from when the claim
// was sent, minus a margin) runs out, before the store lets anyone take
// the claim over. A duplicate that arrives meanwhile gets an
// [*InProgressError] with the claim's remaining time, or waits for the
// result (Options.Wait).
//
// A claim that expires without a result (its executor crashed or stalled)
// is abandoned. The executor may or may not have applied its effect, so by
// default a retry gets an [*UnknownError] ([ErrOutcomeUnknown]) and nothing
// runs; after reconciling, [Keeper.Recover] takes the claim over with a
// greater fence and runs fn again (Options.Abandoned = Rerun does that by
// itself, for work that is idempotent downstream or guarded by the fence).
// The stalled executor's late result is then refused by the store and its
// caller gets an error wrapping [ErrClaimLost]; if nobody took over, a late
// result is still accepted.
//
// An operator settles such a record without running fn: [Keeper.Resolve]
// records the result found by reconciliation (replayed from then on), and
// [Keeper.ForceRelease] drops the claim so that the next retry runs. Both
// go through the store's [Admin] surface (memstore, sqlitestore, pgstore
// and redisstore), which also lists records by state ([Admin.List]). An
// operator holds no token, so each change is guarded by the fence the
// operator inspected ([Settle]): it is refused with [ErrChanged] if the
// record moved on, and with an [*InProgressError] while the claim is live
// unless forced. The tenure command's "idempotency list|resolve|release"
// do the same from a shell.
//
// # Errors and retention
//
// If fn returns an error the claim is released and a retry runs fn again,
// unless the error is final ([Final], or every error with Options.Errors =
// StoreErrors): then it is recorded and replayed as a [*FinalError]. A
// panic stops the keep-alive and releases the claim, then goes on. Apart
// from a recorded *FinalError, an error never comes with a value. A result that cannot be recorded (the store
// stopped answering) is reported as an [*UnknownError] with Ran set; a
// store that cannot be reached before fn runs yields [ErrUnavailable] and
// fn does not run.
//
// Results are kept for Options.Retention (24h by default) from their
// completion, judged on the store's clock when the record is read; after
// that the key runs as new. Choose the retention to cover the clients'
// longest retry horizon.
//
// # Stores
//
// A [Store] is a view of one of tenure's stores: memstore (in process),
// sqlitestore, pgstore and redisstore (Idempotency()). The SQL stores also
// offer the transactional form, [Keeper.DoTx] with the store's
// Tx(tx).Idempotency() (package txn): the claim row is written in the caller's transaction,
// so the record and the caller's own rows commit or roll back together,
// and a concurrent duplicate waits for that transaction, then replays its
// result (or runs after a rollback).
//
// # HTTP
//
// [Keeper.Middleware] implements the IETF Idempotency-Key draft for POST
// and PATCH: 400 for a missing or malformed key, 413 for a body over the
// limit, 422 for another payload, 409 with Retry-After while in flight,
// 503 when the store is down; the first response's status, allow-listed
// headers and body (up to HTTPOptions.MaxRecordBytes) are replayed byte for
// byte with Idempotent-Replayed: true, and a 5xx response or a panic
// releases the claim. Records are scoped by HTTPOptions.Principal or, by
// default, by a keyed digest of the request's credentials (Authorization
// and Cookie), so clients never get each other's responses unless
// HTTPOptions.Anonymous says so.
//
// [Keeper.TxMiddleware] is the same middleware in one database transaction
// per request on a SQL store: the handler writes its rows in the
// transaction it finds with [TxFromContext], the response is recorded in
// the same transaction and sent only after the commit, and a response that
// is not recorded (5xx, a status HTTPOptions.Record refuses, a panic) rolls
// everything back.
package idempotency
