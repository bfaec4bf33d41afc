// Package etcdstore keeps tenure's fenced leases in etcd v3, through
// go.etcd.io/etcd/client/v3.
//
//	c, _ := clientv3.New(clientv3.Config{Endpoints: []string{"http://127.0.0.1:2379"}})
//	es, err := etcdstore.New(c, nil) // tenure.ErrInvalid: nil client or a bad option
//	locker, err := lease.New(es.Leases(), nil)
//
// # Keys
//
// Every key lives under Options.Prefix (default "tenure/"):
//
//	<prefix>lock/<key>          the lock: value = the holder's token, attached to an etcd lease;
//	                            its create revision is the fence
//	<prefix>holder/<key>        the holder's description (lease/driver.HolderAcquirer), on the lock's
//	                            etcd lease: it goes when the lock goes
//	<prefix>res/<resource>      the value written by FencedPut
//	<prefix>admitted/<resource> the greatest fence FencedPut admitted for resource, as 20 decimal digits
//	<prefix>waiter/<key>\x00<id> a waiter's place in the key's queue (lease/driver.Queuer): id is
//	                            lease/driver.WaiterID of its token, the create revision its arrival;
//	                            on an etcd lease that lives at least the waiter's stay
//
// A free key goes to the waiter whose place has the lowest create revision
// (the acquire's compare asks that no place is older), as etcd's
// concurrency.Mutex orders its waiters; a plain acquire of a key with
// places is refused. Waiters are woken by a watch of the lock and of the
// queue (Watch): a release and an expiry both delete the lock key, so both
// wake the first waiter.
//
// The leases view lists keys (lease.Lister) by ranging over the locks
// under a prefix, one page per call, with the holder descriptions of the
// same range read in the same txn.
//
// Retention: a lock and its holder description expire with their etcd
// lease, natively, and a release deletes both; a waiter's place expires
// with its own etcd lease. Nothing of an ended lease is kept and nothing
// needs sweeping: fences are etcd revisions, which never go back, so a key
// needs no record to get a greater fence next time. (Earlier releases
// kept an empty <prefix>fence/<key> record per key ever locked; once no
// instance of such a version runs, `etcdctl del --prefix <prefix>fence/`
// removes them.)
//
// # Fences
//
// The fence of a tenure is the create revision of its lock key: the revision
// of the etcd transaction that created it. Revisions are linearizable and
// grow across the whole cluster, so every new holder of a key gets a fence
// above every fence granted before, across releases, expiries, member
// failures and leader changes. The fence is never the etcd lease ID, which
// is not monotonic. A holder that re-acquires with its own token keeps its
// fence. Revisions are persisted with the data, so a restarted member or
// cluster continues above every fence it granted.
//
// The guarantee lasts as long as etcd's data does. A cluster rebuilt empty
// starts again at revision 1, and one restored from a snapshot continues
// from the snapshot's revision, so fences granted after the snapshot can be
// granted again. Guards outside etcd that admitted such fences then refuse
// the new holders (they fail closed, with fence.ErrStale) until revisions
// pass the fences they admitted; restore with `etcdutl snapshot restore
// --bump-revision` (etcd 3.5 and later) to skip past them. Guards kept by
// FencedPut live in the same etcd and go back together with the leases.
//
// # Expiry
//
// Expiry is judged by etcd alone: each lock key is attached to an etcd lease,
// and the key disappears when the leader revokes the expired lease. The
// store never keeps an etcd lease alive, so every lock expires on its own
// schedule whatever happens to the other locks.
//
// The locks of one TTL class share etcd leases: the store asks for a lease
// of ceil(ttl + 250ms) whole seconds and puts every lock acquired or renewed
// with a TTL of that class on it for as long as the lease still lives at
// least ttl past the call (judged from when the lease's grant was sent: etcd
// applies a grant after it was sent, so the lease cannot end sooner). Each
// call thus puts its lock on a lease that ends at least ttl and at most
// ceil(ttl + 250ms) seconds after the call, which is also the longest a
// holder that stops renewing keeps its key; etcd raises short TTLs to its
// minimum (about 2 s with the default election settings: 1.5 election
// timeouts, rounded up). Grant.TTL is the least time the lock has from the
// start of the call (at least ttl); the Locker computes its validity from
// that. A leader change restarts the remaining TTL of every lease on the
// new leader, which only ever makes expiry later, never earlier. Remaining
// times (Info.TTL, HeldError.TTL) come from etcd in whole seconds, rounded
// down.
//
// Acquire is one transaction that creates the lock on its class's current
// lease (or, for the token that already holds the key, moves the lock onto
// it, keeping its fence); a new lease is granted about once per second per
// class, with an ID chosen by the store, and the transaction is sent as soon
// as the grant's reply arrives or briefly after sending the grant without
// waiting longer, so that an acquire whose replies are lost still takes
// effect and can be reconciled by retrying with the same token, like an
// acquire on the stores that need one request. Renew is one transaction that
// moves the lock onto a lease that lives at least the new TTL, keeping its
// fence; it fails with lease.ErrNotHeld once etcd deleted the key. Release
// is one transaction that deletes the lock; its lease is left to expire. A
// cycle of acquire and release is two Raft writes, the same as with
// clientv3's concurrency.Mutex on a session.
//
// # Guards
//
// Compare returns a txn comparison that holds only while a lease is the
// current tenure of its key. Put it in your own transaction next to the
// protected write: etcd checks the holder and applies the write in one atomic
// step, which also refuses a holder whose lease already expired before the
// next holder wrote anything. FencedPut is a max-fence guard for values kept
// in etcd: it writes only if the fence is greater than every fence admitted
// for the resource before, in one transaction.
//
// # Errors
//
// Input is checked with lease/driver.Validate* before anything is sent; bad input
// grants no etcd lease and writes nothing. Transport failures, gRPC
// Unavailable, DeadlineExceeded and Canceled replies (no leader, request
// timed out) and context errors wrap lease.ErrUnavailable: the outcome of a
// write is unknown and a retry with the same token reconciles it. Replies in
// which etcd definitively refuses a request are plain errors. Tokens never
// appear in errors.
//
// The store's calls are fail-fast: while the client cannot reach etcd
// (its connection is in transient failure) they fail at once with
// lease.ErrUnavailable instead of waiting, as clientv3's own calls do, until
// the context ends. A holder thus learns in time that it cannot renew. They
// go through the client's connection, so its endpoints, balancing,
// credentials and interceptors apply.
//
// # Not offered
//
// etcd is not a store for rate limits: every decision would be a Raft write,
// replicated and fsynced on a quorum of members, for state that is worthless
// seconds later. Use Redis, PostgreSQL or the in-process stores for those.
package etcdstore
