// Package session keeps server-side sessions that a late request can never
// revive.
//
// A [Manager] creates, loads, saves, rotates and revokes sessions in a
// [Store] (memstore, sqlitestore, pgstore or redisstore, each through its
// Sessions() view) and is the HTTP middleware ([Manager.Handler]).
//
// What it guarantees:
//
//   - Tokens are 32 random bytes (plus the 2-byte shard of their user),
//     given to the client once. The store keeps only their SHA-256 (the
//     [ID]); presenting an ID as a token fails. [Token] redacts itself in
//     String, every fmt verb, slog and JSON, also when held in an unexported
//     field of another struct (it keeps the secret behind a pointer that
//     fmt does not follow). Tokens are compared with [Token.Equal], not ==.
//   - Every session has an idle and an absolute deadline, both judged on
//     the store's clock at every read, whatever the store's TTL cleanup has
//     done. An idle refresh sets min(now + idle, absolute); rotation keeps
//     the absolute deadline, so no amount of activity or rotation extends a
//     session past it.
//   - Every write is a compare-and-set on the session's version in one
//     atomic store step, and only Create and Rotate (with a fresh ID) ever
//     create a record. A save that arrives after a logout or a rotation
//     gets ErrNotFound and changes nothing; two saves from the same version
//     give one success and one ErrConflict.
//   - RevokeUser ends all of a user's sessions atomically, including
//     sessions created or rotated while it runs; List reads a per-user
//     index, never all sessions.
//   - A store that cannot be reached yields ErrUnavailable, never "no
//     session": the middleware answers 503.
//
// A revoke stops every later load, not a request that loaded the session a
// moment before and commits after the logout. Where a sensitive action
// must not commit once the session is revoked, check the session at the
// commit, in the same atomic step: txn.Tx's CheckSession on the SQL stores,
// redisstore's SessionSet, memstore's WithSession.
//
// The middleware refuses cross-origin unsafe requests
// (http.CrossOriginProtection) before the session is touched, loads the
// session from a "__Host-session" cookie (Secure, HttpOnly, SameSite=Lax,
// no Max-Age) with its idle refresh, and saves changes with a
// compare-and-set before the response's headers go out. Login rotates the
// token, Logout revokes the session and clears the cookie, every response
// that sets the cookie carries Cache-Control: no-store, and every response
// carries Vary: Cookie.
//
// A request may carry several cookies of the session's name (browsers send
// all that match, the most specific path first, and a sibling host can
// plant one whose name lacks the __Host- prefix). The middleware tries the
// well-formed ones in order, at most [MaxSessionCookies], and uses the
// first that names a live session; it clears the cookie only when it tried
// every one and none is live, so a forged cookie never logs the user out.
// Past the limit the request is anonymous and nothing is cleared.
//
// Each store's conformance to this contract is checked by
// session/sessiontest. The Store contract in full, the checks every store
// runs before its first write and the user shard that session IDs start
// with are in package github.com/tenurekit/tenure/session/driver, for store
// writers; [Store], [Record], [ID], the limits and the errors are the same
// there and here.
package session
