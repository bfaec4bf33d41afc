// Package redisstore keeps tenure's leases and fenced values in Redis or
// Redis Cluster (7.0 or later), through a rueidis client or a go-redis v9
// client:
//
//	c, _ := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}, DisableRetry: true})
//	db, err := redisstore.New(c, nil) // tenure.ErrInvalid: nil client or a bad option
//	locker, err := lease.New(db.Leases(), nil)
//
//	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{"127.0.0.1:6379"}, MaxRetries: -1, ContextTimeoutEnabled: true})
//	db, err := redisstore.NewGoRedis(rdb, nil)
//
// # Clients
//
// Both constructors return the same *Store: every view (Leases,
// Idempotency, Limits, Sessions, Schedules), the guards (FencedSet,
// FencedSetAtLeast, HolderSet, FencedGet, SessionSet, SessionGet) and the
// server check behave the same and run the same Lua scripts on the same
// keys, so a service may move from one client to the other, or run both
// against one server. [New]
// takes a rueidis.Client (single node, Cluster, Sentinel). [NewGoRedis]
// takes a redis.UniversalClient: a *redis.Client (one server, or
// redis.NewFailoverClient) or a *redis.ClusterClient
// (redis.NewFailoverClusterClient too); a *redis.Ring is refused (with an
// error wrapping tenure.ErrInvalid), because
// it moves keys to another shard when one is down and would let a second
// holder in. On a cluster, every script and command is routed by its first
// key, and all the keys of one call share its hash tag. Scripts run with
// EVALSHA and fall back to EVAL on NOSCRIPT on both clients (go-redis'
// Script.Run does the same).
//
// Two client settings matter and are the caller's to make, since the store
// never reconfigures a client it was given:
//
//   - Retries. Disable them (rueidis: DisableRetry; go-redis: MaxRetries:
//     -1). See "Client retries" below for what a retry can do otherwise.
//   - Deadlines. rueidis ends a call when its context ends. go-redis does
//     so only with ContextTimeoutEnabled: true; without it a call whose
//     reply is lost waits for the client's ReadTimeout (3 seconds by
//     default) whatever the context says.
//
// # Client retries
//
// A client that retries by itself sends a write again after a network
// error or a read timeout, when the server may already have applied it
// (go-redis does this up to MaxRetries times, 3 by default; its cluster
// client also tries another node). No retry can make the store grant,
// admit or allow more than once: every write is judged again by its
// script. The writes are idempotent per token where that is possible:
// Acquire and Renew (the same token gets the same grant, also for the
// schedule's claims), HolderSet (the same holder writes the same value), a
// concurrency permit (keyed by its ID), and plain deletes. A retried write
// of the others is applied once and may be reported wrongly, always on the
// refusing side, for example:
//
//   - Release: lease.ErrNotHeld for a release that happened.
//   - FencedSet: a *fence.StaleError for a write that landed (its fence is
//     then the admitted one).
//   - A rate limit decision: counted twice, so fewer requests are allowed.
//   - Session Create and Save: session.ErrConflict (or an error) for a
//     session that was created or saved; an unused new session expires on
//     its idle deadline.
//   - The idempotency claim (Begin): idempotency.ErrInProgress for the
//     caller's own claim, which expires after its claim TTL; Complete: a
//     lost claim for a result that was stored.
//   - CompleteSlot: an error for a completion that committed; its effects
//     were applied once.
//
// With retries disabled, each of these is reported as lease.ErrUnavailable
// (or the primitive's ErrUnavailable): the outcome is unknown, and the
// caller decides whether to send it again.
//
// # Keys
//
// Every key of one lease shares a hash tag, so a lease lives on one node of
// a cluster and its scripts never cross slots:
//
//	<prefix>{<key>}:lock    the holder's token, with PX = the lease's TTL
//	<prefix>{<key>}:fence   the last fence granted, with PX = the lease's TTL +
//	                        FenceRetention (default 0: it expires with the lock)
//	<prefix>{<key>}:holder  "<fence> <description>", with PX = the lease's TTL (only for
//	                        a grant with a holder description)
//	<prefix>{<key>}:queue   the key's waiters (lease/driver.Queuer), by arrival, and
//	<prefix>{<key>}:stays   by the end of their stay; both expire with the longest stay
//	<prefix>{<key>}:handover  the waiters that take a hand-over (a hash: token ->
//	                        attempt, grant end, grant channel, holder), expiring
//	                        with the queue
//	<prefix>{<n>}:floor     the fence floor of one hash slot, without expiry
//
// A key's own records go with its lock: nothing is kept per key once its
// lease ended and its TTL (plus FenceRetention) passed, so locking ever new
// keys does not fill the server. What stays is the fence floor of each hash
// slot used: the greatest fence granted in the slot. n is the smallest
// number whose decimal form hashes (CRC16 modulo 16384, the cluster's
// HASH_SLOT) to the slot of the lease's hash tag, so the acquire script
// (and a release that hands the key over) reads and raises the floor in
// the lease's own slot, on one node of a cluster; there are at most 16384
// floors per prefix, about 100 bytes each. A slot claim of a schedule uses the floor of its job's slot. No
// other key of the store has such a name: a lease's and a fenced
// resource's keys end in the suffixes above, and the other primitives'
// keys carry a tag or a marker of their own ({s:, {sched:, idem{, rl{).
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
// it to the token with PX ttl and grants the fence max(last+1, floor+1,
// TIME in microseconds), where last is the key's fence key while it lasts
// and floor its slot's fence floor, and raises the floor to the new fence;
// if the same token holds it, it renews it to ttl and returns the same
// fence (so an acquire whose reply was lost can be retried); if another
// token holds it, it returns the holder's PTTL as a *lease.HeldError.
// Renew extends only a lock that still carries the token (and its fence
// key to ttl + FenceRetention): an expired lock is never brought back.
// Release is DELEX key IFEQ token where every node has it (Redis 8.4+) and
// a compare-and-delete script otherwise (which deletes the holder key too),
// never a plain DEL; both leave the fence key to its expiry, so Inspect
// reports the last fence until then. Inspect is one read-only script; a
// key whose records expired reads free with fence 0. Arguments are
// validated in Go before anything is sent, and again by each script before
// its first write, since a Lua error does not roll back earlier writes.
// Scripts run with EVALSHA and fall back to EVAL on NOSCRIPT (script caches
// are per node and are lost on restart).
//
// # Contended keys: the queue, wake-ups and hand-over
//
// A waiting lease.Locker keeps a place in the key's queue (the queue and
// stays keys above), and a free key goes only to the first live waiter.
// The release script publishes a wake-up naming that waiter on the key's
// channel, <prefix>{<key>}:wake (SPUBLISH on a cluster, so it stays on the
// key's shard), which every watching process subscribes to. Each store
// also subscribes, while it watches a key, to a channel of its own for the
// key: the key's channel, a colon and 16 random hex digits chosen by New.
// A waiting Locker's place names that channel (AcquireHandover), and a
// release that finds such a waiter first, its grant still ahead, and the
// channel subscribed (PUBSUB NUMSUB or SHARDNUMSUB, from the script) grants
// it the key in the release script itself: a new fence above the last,
// for the TTL its attempt asked for, counted from that attempt. The
// wake-up on that channel carries the grant, so the hand-off takes one
// round trip instead of two. A waiter whose process ended has no
// subscriber left and is woken instead, never granted the key (a waiter on
// a machine that vanished without closing its connection may still be
// handed the key within its stay, until the server drops that connection;
// the key then waits for the grant's TTL, as a lease granted just before
// the machine vanished would). Where the
// release waits for replicas (see Replication) it does not hand the key
// over, and a waiter whose store waits for replicas takes no hand-over:
// the waiter takes the key with its own acquire, which the replicas
// confirm before it is reported. Watch subscribes to both channels on one
// connection. On servers with DELEX, a key this store
// saw contended in the last 10 s is released by the script, which can
// hand it over.
//
// # Holder descriptions and listing
//
// The lease view implements lease/driver.HolderAcquirer: AcquireHolder (which the
// lease.Locker calls with Options.Holder) writes the description in the
// acquire script itself, to the holder key, tagged with the grant's fence
// and with the lock's TTL; Renew extends it with the lock. Inspect, List
// and *lease.HeldError report a description only while the lock is held
// and the holder key names the current fence, so a description never
// outlives its grant: the release script deletes the holder key, and a
// DELEX release (which touches one key) leaves it to expire with the
// lease's TTL, when it no longer counts. A grant without a description
// writes nothing more than before, and a re-acquire without one deletes
// the old one.
//
// List (lease.Lister) walks the fence keys with SCAN on every master of a
// cluster (MATCH on the store's prefix and the listed key prefix, COUNT
// 1000), keeps only the limit smallest keys after the start (memory bounded
// by the limit), and reads each with the inspect script. Its cost grows
// with the number of lease keys the store keeps, so it is meant for
// operators (tenure lease list), not for request paths. A key is listed
// while its fence key exists: held, or just ended (until the ended lock's
// TTL would have run out, plus FenceRetention). The fence floors are never
// listed: the pattern matches only keys ending in "}:fence".
//
// # Retention
//
// Every key but a schedule's carries a TTL and expires on its own: locks,
// fence and holder keys with their lease, idempotency records with their
// retention, sessions with their deadlines, rate-limit state with its
// window. Schedule slot records (one per slot run) and their ledger
// entries stay until [Store.Sweep] deletes those final for the schedule
// retention (default 30 days; each job's latest is kept), one script per
// job on the job's hash slot; `tenure serve` runs it every
// --sweep-interval, and `tenure sweep` on demand.
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
// Fences strictly increase per key, across the end of a lease and the
// expiry of every record the key had: each grant raises its slot's fence
// floor to the fence it grants, the floor never goes down, and every new
// fence is above it. This holds however far the server's clock (TIME)
// steps back, and when a server whose clock is behind takes over, as long
// as the slot's floor survives: it is written by the acquire script with
// the grant, so a grant confirmed on the replicas (see "Replication") has
// its floor there too and a failover keeps both, and a restart keeps it
// only with persistence (RDB or AOF), as it keeps the locks.
//
// A fence is also never below the granting server's clock (TIME) in
// microseconds (the lease/driver.NextFence rule). That is what remains when
// the floor is lost: a server that restarts without persistence forgets
// its fence keys and floors, and so does a replica promoted before it
// received the last grants; the next fence is then the current TIME in
// microseconds, which is above every fence granted before as long as the
// clock of the server granting now is not behind the clock of the one that
// granted before (fences run ahead of the clock only by one per grant made
// within one microsecond). Lock keys lost that way end their leases
// early: holders find out at their next renewal (lease.ErrNotHeld), and the
// guard refuses their late writes once a newer fence has written.
//
// Fence keys written before the floors existed (when FenceRetention kept
// them 7 days by default) still count while they last: a new grant on such
// a key is above its old fence and raises the slot's floor past it. A key
// whose old fence key expired before it was granted again is left to the
// clock floor, as it was before the floors.
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
// [Store.SessionSet] guards a write with a session instead: it sets a
// value of a user only while a session of that user is live on the
// server's clock (not revoked, not rotated away, within its idle and
// absolute deadlines, not ended by a revoke of the user's sessions in
// progress) and, when a version is given, still at it, checking and
// writing in one script that leaves the session as it was. A request
// authorized at its start and delayed past the logout writes nothing
// (session.ErrNotFound). The value is kept without expiry under
// [Store.SessionValueKey], in the hash tag of the user's sessions
// (<prefix>{s:<shard>}:v:...), and read back with [Store.SessionGet].
//
// # Replication
//
// A write is reported done only once the replicas of the primary that ran
// it confirmed it (see [Replication]; on by default). The store sends the
// write and WAIT N (WAITAOF 1 N where the primary has WAITAOF and runs
// with appendonly yes) over one connection, in one round trip, because
// WAIT counts the writes of the connection it is sent on: on rueidis a
// dedicated connection (Dedicate), on go-redis a pipeline of a
// *redis.Client (one pooled connection). On a cluster the store routes
// the pair itself, to the primary that serves the key (learned with
// CLUSTER SLOTS and refreshed while it writes), and follows MOVED and ASK
// by hand, since a client that redirected the write alone would leave WAIT
// counting another node's writes. N is every replica the primary lists as
// online in INFO replication (asked every second while the store writes,
// and again whenever a count comes up short), or Replication.Replicas.
// When too few confirm within Replication.Timeout the call fails with
// [ErrUnconfirmed] (and the primitive's ErrUnavailable): a lease, claim,
// permit or session it granted is given back first, other writes have an
// unknown outcome. A primary without an online replica is not waited for.
// Rate limit decisions are waited for only with Replication.RateLimits.
// [Store.Replicas] reports what the store found and how it confirms, per
// primary; tenure doctor shows the same. docs/operations.md ("Failover")
// states what is covered and the window that remains.
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
// A user restricted by an ACL needs, besides the scripting, key and
// publish commands, SUBSCRIBE (SSUBSCRIBE on a cluster) for wake-ups and
// PUBSUB (the release script asks PUBSUB NUMSUB, or SHARDNUMSUB, whether
// a waiter still listens before it hands a key over).
//
// # Errors
//
// A write that the replicas did not confirm wraps [ErrUnconfirmed] and
// lease.ErrUnavailable (see "Replication"). Transport failures and
// context errors during a request wrap lease.ErrUnavailable (on either client; a nil reply is never taken for
// an error, nor a failure for a missing key): a write that was sent may have been applied, and
// retrying it with the same token reconciles. A server that is not serving
// (LOADING, CLUSTERDOWN, TRYAGAIN, BUSY, MASTERDOWN, READONLY,
// NOREPLICAS, and a MOVED or ASK that a confirmed write no longer follows)
// is reported the same way. Other server replies are plain errors. Errors never contain
// a token.
//
// # Performance
//
// Every call is one round trip (Acquire and AcquireHolder, Renew, Release,
// Inspect, FencedSet, FencedGet; List is a walk, see above). On rueidis ([New]), calls that overlap other calls
// of the store share the client's auto-pipelined connection, and a call
// that finds no other call of the store in flight is sent as a blocking
// command, which rueidis serves on a pooled connection in the caller's
// goroutine: a pipelined rueidis connection that has seen concurrent
// callers hands every call to its writer and reader goroutines, which
// costs a lone caller more than the round trip itself. The same commands
// are sent either way. go-redis ([NewGoRedis]) takes one pooled connection
// per call. Under many concurrent callers the rueidis store is the faster
// (several calls per system call on both sides); for a lone caller both
// clients cost about the same. The server check costs one round trip per
// node on the first write and an atomic load afterwards.
//
// With replicas online, a confirmed write is still one round trip from the
// client, which now lasts until a replica acknowledged it (one more round
// trip between the primary and its replica), and it takes a connection of
// its own for that time instead of sharing rueidis' pipeline: bench/README.md
// measures a lease cycle at about half the rate of an unconfirmed one with
// one replica on the same host. Without replicas nothing changes.
package redisstore
