// Package redisstore keeps tenure's leases and fenced values in Redis or
// Redis Cluster (7.0 or later), through a rueidis client:
//
//	c, _ := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}, DisableRetry: true})
//	db := redisstore.New(c, nil)
//	locker, err := lease.New(db.Leases(), nil)
//
// # Keys
//
// Every key of one lease shares a hash tag, so a lease lives on one node of
// a cluster and its scripts never cross slots:
//
//	<prefix>{<key>}:lock    the holder's token, with PX = the lease's TTL
//	<prefix>{<key>}:fence   the last fence granted, kept TTL + FenceRetention (default 7 days)
//
// A fenced resource has the same shape: <prefix>{<resource>}:value holds
// the value and <prefix>{<resource>}:admitted the greatest fence admitted,
// both without expiry. '%', '{' and '}' in prefixes, keys and resource
// names are percent-encoded, so the hash tag is always exactly the
// (encoded) name.
//
// # Operations
//
// Acquire is one Lua script (one round trip): if the lock is free it sets
// it to the token with PX ttl and grants the fence max(last+1, TIME in
// microseconds); if the same token holds it, it renews it to ttl and returns
// the same fence (so an acquire whose reply was lost can be retried); if
// another token holds it, it returns the holder's PTTL as a
// *lease.HeldError. Renew extends only a lock that still carries the token:
// an expired lock is never brought back. Release is DELEX key IFEQ token
// where every node has it (Redis 8.4+) and a compare-and-delete script
// otherwise, never a plain DEL; it keeps the fence key, so Inspect reports
// the last fence. Inspect is one read-only script. Arguments are validated in
// Go before anything is sent, and again by each script before its first
// write, since a Lua error does not roll back earlier writes. Scripts run
// with EVALSHA and fall back to EVAL on NOSCRIPT (script caches are per node
// and are lost on restart).
//
// # How expiry is judged
//
// Only by the server's clock: the lock key's PX expiry and PTTL, and TIME
// inside the acquire script. The client's clock is never compared with the
// server's; the lease.Locker only uses its own monotonic clock to stop work
// early.
//
// # Fences after data loss
//
// A fence is never below the granting server's clock (TIME) in microseconds
// (the lease.NextFence rule). A server that restarts without persistence
// forgets its fence keys, and so does a replica promoted before it received
// the last grants; the next fence is then the current TIME in microseconds,
// which is above every fence granted before as long as the clock of the
// server granting now is not behind the clock of the one that granted
// before (fences run ahead of the clock only by one per grant made within
// one microsecond). The same holds once a fence key expires after
// FenceRetention without use. Lock keys lost that way end their leases
// early: holders find out at their next renewal (lease.ErrNotHeld), and the
// guard refuses their late writes once a newer fence has written.
//
// Fences are below 2^53 until the year 2255, so the scripts' Lua numbers
// (doubles) hold them exactly; the fenced-write scripts compare fences as
// decimal strings and are exact for every uint64.
//
// # The guard
//
// A lock coordinates; it does not protect. [Store.FencedSet] writes a value
// only if the writer's fence is greater than every fence admitted for that
// resource (strict; [Store.FencedSetAtLeast] also admits an equal fence),
// comparing and writing in one script, and returns a *fence.StaleError
// otherwise. A max-fence guard does not know about time: a holder whose
// lease expired is still admitted until the next holder has written.
// [Store.HolderSet] closes that window by checking, in the same script, that
// the writer's token and fence still hold the lock.
//
// # Server requirements
//
// Before its first write, and again after a connection failure, the store
// checks every node ([Store.Check], one round trip per node): a
// maxmemory-policy other than noeviction is refused with
// [ErrEvictionPolicy] (an evicting server drops locks like cache entries)
// unless Options.AllowEviction is set. A write refused because the server
// reached maxmemory under noeviction returns [ErrOutOfMemory]; nothing was
// granted or stored. Renewals and releases still work on a full server.
//
// # Errors
//
// Transport failures and context errors during a request wrap
// lease.ErrUnavailable: a write that was sent may have been applied, and
// retrying it with the same token reconciles. A server that is not serving
// (LOADING, CLUSTERDOWN, TRYAGAIN, BUSY, MASTERDOWN, READONLY) is reported
// the same way. Other server replies are plain errors. Errors never contain
// a token.
//
// # Performance
//
// Every call is one round trip (Acquire, Renew, Release, Inspect,
// FencedSet, FencedGet); rueidis pipelines concurrent calls on shared
// connections. The server check costs one round trip per node on the first
// write and an atomic load afterwards.
package redisstore
