// Package lease hands out fenced lease locks: time-limited, exclusive
// tenures of a key, each with a fencing token that a resource can check.
//
// # The model
//
// A [Store] (memory, SQLite, PostgreSQL, Redis, etcd) grants a key to a
// random token for a TTL judged on the store's own clock. Every grant carries
// a fence strictly greater than every earlier grant for that key. A [Locker]
// wraps a Store with fresh 128-bit tokens, waiting with jittered backoff,
// keep-alive and clean-up; a [Lease] is one tenure.
//
// A lease coordinates; it does not protect. A holder that pauses (GC, swap,
// SIGSTOP, a slow network) can wake after its lease expired and still
// believe it holds it. Two things close that hole:
//
//   - The client's validity ends before the store's expiry: it is measured on
//     the monotonic clock from when the request was sent, minus a margin.
//     [Lease.Done] closes and the context [Locker.Do] gives its function is
//     cancelled at that point, before another holder can be granted the key.
//   - The resource has the last word: pass [Lease.Fence] to the guard where
//     the write lands (see package fence and each store's Admit, CheckHolder,
//     FencedSet or Compare). A late write with an older fence is refused.
//
// # Contended keys
//
// On a store with a queue of waiters (driver.Queuer: every store tenure
// ships) a waiting Acquire keeps one place under one token and a free key
// goes to the first live waiter, so waiters are served in arrival order;
// on a store that wakes waiters (driver.Waker: every store tenure ships)
// the release wakes the waiter that is first, and polling at the holder's
// remaining TTL (at most Options.RetryMax) is only the fallback. On a
// store with hand-over (driver.Handover: pgstore and redisstore) the release grants the
// key to the first waiting Acquire itself and the wake-up carries the
// grant, which Acquire takes while its validity, counted from the
// waiter's last attempt, lies ahead. Options.Unfair turns the queue off. Elsewhere Acquire backs off with
// jitter.
//
// # A tenure held elsewhere
//
// A holder in another process (a client of tenure serve, a worker in
// another language) can pass its key, token and fence to the process
// where the write lands; [Remote] makes a Lease of them for the guards
// that check the current holder at the store (CheckHolder, HolderSet,
// etcdstore's HolderPut). Such a lease cannot be renewed or released
// here: only the store knows whether it still holds its key.
//
// # Unknown outcomes
//
// A request that got no reply may have been applied. Stores make every write
// idempotent per token: acquiring again with the holding token returns the
// same grant. TryAcquire retries such a request with the same token and, if
// the outcome stays unknown or its context ends while a request is in
// flight, releases the token in the background, so no lock is left behind
// for a whole TTL. A store that cannot be reached is an error wrapping
// [ErrUnavailable], never "acquired" or "not held".
//
// # Who holds a key
//
// A Locker gives each grant a short description of its holder,
// Options.Holder (default [DefaultHolder]: host name and process ID; at
// most [MaxHolderLen] bytes of printable UTF-8; [New] refuses any other).
// Stores that keep it (memory, SQLite, PostgreSQL, Redis, etcd) report it
// in [Info].Holder, [HeldError].Holder and [Lister] pages; with a store
// that keeps none the Locker acquires without it. The description is for
// operators and must not hold secrets.
//
// # Errors
//
// [ErrHeld] (as *[HeldError], with the holder's remaining TTL and
// description), [ErrNotHeld],
// [ErrLost], [ErrInvalid] (nothing was written) and [ErrUnavailable]; test
// them with errors.Is. Tokens are secrets: they never appear in errors, and
// a Lease prints and logs without its token.
//
// # Writing a store
//
// The Store contract in full, the checks every store runs before its first
// write, the optional HolderAcquirer and the fence rule stores share are in
// package github.com/tenurekit/tenure/lease/driver; applications do not
// need it. [Store], [Grant], [Info], [HeldError], [Lister], the limits and
// the errors are the same there and here.
package lease
