package mutants

import "time"

// List returns every mutant. Each breaks one guarantee on one store; the
// fragments are exact and must each occur once in their file. Workloads
// name the `tenure proof` workloads that must report the broken guarantee;
// Suite the store's conformance subtests that must fail.
func List() []Mutant { return list }

// Files the mutants edit.
const (
	memLeases   = "store/memstore/memstore.go"
	memIdem     = "store/memstore/idempotency.go"
	memSessions = "store/memstore/session.go"
	memSched    = "store/memstore/schedule.go"
	memLimits   = "internal/limitmem/engine.go"

	sqliteQueries  = "store/sqlitestore/sqlitestore.go"
	sqliteIdem     = "store/sqlitestore/idempotency.go"
	sqliteSessions = "store/sqlitestore/session.go"
	sqliteSched    = "store/sqlitestore/schedule.go"
	sqliteLimits   = "store/sqlitestore/ratelimit.go"
	sqliteSweep    = "store/sqlitestore/sweep.go"

	pgQueries    = "store/pgstore/pgstore.go"
	pgIdem       = "store/pgstore/idempotency.go"
	pgSessions   = "store/pgstore/session.go"
	pgSched      = "store/pgstore/schedule.go"
	pgMigrations = "store/pgstore/migrations/0001_initial.up.sql"
	pgRecheck    = "store/pgstore/migrations/0007_lease_fence_recheck.up.sql"
	pgQueue      = "store/pgstore/queue.go"

	redisLua = "store/redisstore/lua/"

	etcdStore  = "store/etcdstore/etcdstore.go"
	etcdLeases = "store/etcdstore/leases.go"
)

var list = []Mutant{
	// ---- Fence admission, strict (Admit, FencedSet, FencedPut) ----
	{
		Name: "memory/fencedset-strict-true", Store: "memory",
		Breaks: "FencedSet admits any fence: the strict max-fence comparison replaced by true",
		Edits: []Edit{{File: memLeases,
			Old: "if !mode.Admits(cur.fence, f) {",
			New: "if mode != fence.Strict && !mode.Admits(cur.fence, f) {"}},
		Workloads: []string{"fenced-register"}, Suite: "Lease",
	},
	{
		Name: "memory/fencedset-strict-admits-equal", Store: "memory",
		Breaks: "FencedSet (strict) admits a fence equal to the greatest admitted one",
		Edits: []Edit{{File: memLeases,
			Old: "return s.fencedSet(ctx, resource, f, value, fence.Strict)",
			New: "return s.fencedSet(ctx, resource, f, value, fence.AtLeast)"}},
		Workloads: []string{"fenced-register"}, Suite: "Lease",
	},
	{
		Name: "sqlite/admit-strict-true", Store: "sqlite",
		Breaks: "Admit admits any fence: the max-fence comparison in the upsert replaced by true",
		Edits: []Edit{{File: sqliteQueries,
			Old: "WHERE $F.fence < excluded.fence",
			New: "WHERE true"}},
		Workloads: []string{"fenced-register"}, Suite: "Lease", CI: true,
	},
	{
		Name: "postgres/admit-strict-true", Store: "postgres",
		Breaks: "Admit admits any fence: the max-fence comparison in the upsert replaced by true",
		Edits: []Edit{{File: pgQueries,
			Old: "WHERE f.fence < excluded.fence",
			New: "WHERE true"}},
		Workloads: []string{"fenced-register"}, Suite: "Lease",
	},
	{
		Name: "redis/fencedset-strict-true", Store: "redis",
		Breaks: "FencedSet (strict) admits any fence: the comparison in the script skipped in strict mode",
		Edits: []Edit{{File: redisLua + "fencedset.lua",
			Old: "if c < 0 or (c == 0 and mode == 's') then",
			New: "if mode ~= 's' and c < 0 then"}},
		Workloads: []string{"fenced-register"}, Suite: "Lease",
	},
	{
		Name: "etcd/fencedput-true", Store: "etcd",
		Breaks: "FencedPut admits any fence: the comparison with the admitted fence dropped from the txn",
		Edits: []Edit{{File: etcdStore,
			Old: "ops(opTxn(cmps(cmpValue(adm, cmpLess, enc)), put, ops(opGet(adm)))),",
			New: "ops(opTxn(nil, put, ops(opGet(adm)))),"}},
		Workloads: []string{"fenced-register"}, Suite: "Lease",
	},

	// ---- Fence admission, at-least (AdmitAtLeast, FencedSetAtLeast) ----
	{
		Name: "memory/fencedset-atleast-true", Store: "memory",
		Breaks: "FencedSetAtLeast admits any fence, older ones included",
		Edits: []Edit{{File: memLeases,
			Old: "if !mode.Admits(cur.fence, f) {",
			New: "if mode == fence.Strict && !mode.Admits(cur.fence, f) {"}},
		Workloads: []string{"fenced-register"}, Suite: "Lease",
	},
	{
		Name: "sqlite/admit-atleast-true", Store: "sqlite",
		Breaks: "AdmitAtLeast admits any fence: the comparison in the upsert replaced by true",
		Edits: []Edit{{File: sqliteQueries,
			Old: "WHERE $F.fence <= excluded.fence",
			New: "WHERE true"}},
		Workloads: []string{"fenced-register"}, Suite: "Lease",
	},
	{
		Name: "postgres/admit-atleast-true", Store: "postgres",
		Breaks: "AdmitAtLeast admits any fence: the comparison in the upsert replaced by true",
		Edits: []Edit{{File: pgQueries,
			Old: "WHERE f.fence <= excluded.fence",
			New: "WHERE true"}},
		Workloads: []string{"fenced-register"}, Suite: "Lease",
	},
	{
		Name: "redis/fencedset-atleast-true", Store: "redis",
		Breaks: "FencedSetAtLeast admits any fence: the comparison in the script skipped in at-least mode",
		Edits: []Edit{{File: redisLua + "fencedset.lua",
			Old: "if c < 0 or (c == 0 and mode == 's') then",
			New: "if mode == 's' and c <= 0 then"}},
		Workloads: []string{"fenced-register"}, Suite: "Lease",
	},

	// ---- The holder check (HolderSet, CheckHolder, etcd Compare) ----
	{
		Name: "memory/holderset-no-holder-check", Store: "memory",
		Breaks: "HolderSet reduced to a max-fence check: the holder's token, fence and expiry are not compared",
		Edits: []Edit{{File: memLeases,
			Old: "if r == nil || r.token != l.Token().Reveal() || r.fence != l.Fence() || !r.held(s.now()) {",
			New: "if r == nil {"}},
		Workloads: []string{"lease-counter"}, Suite: "Lease",
	},
	{
		Name: "sqlite/checkholder-any-holder", Store: "sqlite",
		Breaks: "CheckHolder passes while anyone holds the key: the token and fence are not compared",
		Edits: []Edit{{File: sqliteQueries,
			Old: `WHERE "key" = ?1 AND token = ?2 AND fence = ?3 AND expires_us > ?4`,
			New: `WHERE "key" = ?1 AND ?2 = ?2 AND ?3 = ?3 AND expires_us > ?4`}},
		Workloads: []string{"lease-counter"}, Suite: "Lease",
	},
	{
		Name: "postgres/checkholder-any-holder", Store: "postgres",
		Breaks: "CheckHolder passes while anyone holds the key: the token and fence are not compared",
		Edits: []Edit{{File: pgQueries,
			Old: "WHERE l.key = $1 AND l.token = $2 AND l.fence = $3 AND l.expires_at > clock_timestamp()",
			New: "WHERE l.key = $1 AND $2::text IS NOT NULL AND $3::bigint > 0 AND l.expires_at > clock_timestamp()"}},
		Workloads: []string{"lease-counter"}, Suite: "Lease",
	},
	{
		Name: "redis/holderset-max-fence", Store: "redis",
		Breaks: "HolderSet reduced to a max-fence check: the holder's token and fence are not compared, so a holder whose lease expired writes until the next holder has",
		Edits: []Edit{{File: redisLua + "fencedset.lua",
			Old: "if holder and (redis.call('GET', KEYS[3]) ~= token or redis.call('GET', KEYS[4]) ~= f) then",
			New: "if false then"}},
		Workloads: []string{"lease-counter"}, Suite: "Lease", CI: true,
	},
	{
		Name: "etcd/compare-any-holder", Store: "etcd",
		Breaks: "Compare holds while anyone holds the key: the lock's create revision is not compared with the fence",
		Edits: []Edit{{File: etcdStore,
			Old: `clientv3.Compare(clientv3.CreateRevision(s.lockKey(l.Key())), "=", int64(l.Fence()))`,
			New: `clientv3.Compare(clientv3.CreateRevision(s.lockKey(l.Key())), ">", int64(0))`}},
		Workloads: []string{"lease-counter"}, Suite: "Lease",
	},

	// ---- Token-checked renew and release ----
	{
		Name: "memory/renew-any-token", Store: "memory",
		Breaks: "Renew extends a lease whatever the token",
		Edits: []Edit{{File: memLeases,
			Old: "if r == nil || r.token != token || !r.held(now) {\n\t\treturn lease.Grant{}, lease.ErrNotHeld",
			New: "if r == nil || !r.held(now) {\n\t\treturn lease.Grant{}, lease.ErrNotHeld"}},
		Workloads: []string{"lease-counter"}, Suite: "Lease",
	},
	{
		Name: "memory/release-any-token", Store: "memory",
		Breaks: "Release frees a lease whatever the token",
		Edits: []Edit{{File: memLeases,
			Old: "if r == nil || r.token != token || !r.held(now) {\n\t\treturn lease.ErrNotHeld",
			New: "if r == nil || !r.held(now) {\n\t\treturn lease.ErrNotHeld"}},
		Workloads: []string{"lease-counter"}, Suite: "Lease",
	},
	{
		Name: "sqlite/renew-any-token", Store: "sqlite",
		Breaks: "Renew extends a lease whatever the token",
		Edits: []Edit{{File: sqliteQueries,
			Old: "AND token = ?2 AND expires_us > ?3\n\t\t\tRETURNING fence",
			New: "AND ?2 = ?2 AND expires_us > ?3\n\t\t\tRETURNING fence"}},
		Workloads: []string{"lease-counter"}, Suite: "Lease",
	},
	{
		Name: "sqlite/release-any-token", Store: "sqlite",
		Breaks: "Release frees a lease whatever the token",
		Edits: []Edit{{File: sqliteQueries,
			Old: "AND token = ?2 AND expires_us > ?3`),",
			New: "AND ?2 = ?2 AND expires_us > ?3`),"}},
		Workloads: []string{"lease-counter"}, Suite: "Lease",
	},
	{
		Name: "postgres/renew-any-token", Store: "postgres",
		Breaks: "Renew extends a lease whatever the token",
		Edits: []Edit{{File: pgQueries,
			Old: "WHERE l.key = $1 AND l.token = $2 AND l.expires_at > c.now\nRETURNING l.fence",
			New: "WHERE l.key = $1 AND $2::text IS NOT NULL AND l.expires_at > c.now\nRETURNING l.fence"}},
		Workloads: []string{"lease-counter"}, Suite: "Lease",
	},
	{
		Name: "postgres/release-any-token", Store: "postgres",
		Breaks: "Release frees a lease whatever the token",
		Edits: []Edit{{File: pgQueries,
			Old: "WHERE l.key = $1 AND l.token = $2 AND l.expires_at > c.now RETURNING l.waiters`,",
			New: "WHERE l.key = $1 AND $2::text IS NOT NULL AND l.expires_at > c.now RETURNING l.waiters`,"}},
		Workloads: []string{"lease-counter"}, Suite: "Lease",
	},
	{
		Name: "postgres/release-contended-any-token", Store: "postgres",
		Breaks: "the release of a contended key (which hands it over to the first waiter) takes it from its holder whatever the token",
		Edits: []Edit{{File: pgQueue,
			Old: "\tWHERE l.key = $1 AND l.token = $2 AND l.expires_at > c.now RETURNING l.fence),",
			New: "\tWHERE l.key = $1 AND $2::text IS NOT NULL AND l.expires_at > c.now RETURNING l.fence),"}},
		Workloads: []string{"lease-counter"}, Suite: "Lease",
	},
	{
		Name: "redis/renew-any-token", Store: "redis",
		Breaks: "Renew extends a lease whatever the token",
		Edits: []Edit{{File: redisLua + "renew.lua",
			Old: "if redis.call('GET', KEYS[1]) ~= token then",
			New: "if not redis.call('GET', KEYS[1]) then"}},
		Workloads: []string{"lease-counter"}, Suite: "Lease",
	},
	{
		Name: "redis/release-any-token", Store: "redis",
		Breaks: "Release frees a lease whatever the token",
		Edits: []Edit{{File: redisLua + "release.lua",
			Old: "if redis.call('GET', KEYS[1]) ~= token then",
			New: "if not redis.call('GET', KEYS[1]) then"}},
		Workloads: []string{"lease-counter"}, Suite: "Lease",
	},
	{
		Name: "etcd/renew-any-token", Store: "etcd",
		Breaks: "Renew extends (and takes over) a lease whatever the token",
		Edits: []Edit{{File: etcdLeases,
			Old: "cmps(cmpValue(lock, cmpEqual, token)),\n\t\t\tops(opPut(lock, token, id), opGet(lock),",
			New: "cmps(cmpCreateRev(lock, cmpGreater, 0)),\n\t\t\tops(opPut(lock, token, id), opGet(lock),"}},
		Workloads: []string{"lease-counter"}, Suite: "Lease",
		// Only a holder paused between its grant and its renewal, for
		// as long as the next holder takes the key, renews over another
		// tenure; etcd's whole-second leases leave a 10 s run four or
		// so pauses, and one full run in about twenty saw none land so.
		Duration: 30 * time.Second,
	},
	{
		Name: "etcd/release-any-token", Store: "etcd",
		Breaks: "Release frees a lease whatever the token",
		Edits: []Edit{{File: etcdLeases,
			Old: "cmps(cmpValue(lock, cmpEqual, token)),\n\t\tops(opDelete(lock), opDelete(s.holderKey(key))),",
			New: "cmps(cmpCreateRev(lock, cmpGreater, 0)),\n\t\tops(opDelete(lock), opDelete(s.holderKey(key))),"}},
		Workloads: []string{"lease-counter"}, Suite: "Lease",
	},

	// ---- Fences after data loss: floored at the store's clock ----
	{
		Name: "memory/fence-not-floored", Store: "memory",
		Breaks: "a new tenure's fence is the last one plus one, not floored at the clock: a restarted store grants fences it granted before",
		Edits: []Edit{{File: memLeases,
			Old: "r.fence = leasedriver.NextFence(max(r.fence, s.floor), now)",
			New: "r.fence = max(r.fence, s.floor) + 1"}},
		Workloads: []string{"lease-counter"}, Suite: "Lease", CI: true,
	},
	{
		Name: "sqlite/fence-not-floored", Store: "sqlite",
		Breaks: "a new tenure's fence is the last one plus one, not floored at the clock: a database restored from an older copy grants fences it granted before",
		Edits: []Edit{
			{File: sqliteQueries, Old: "VALUES (?1, ?2, max(?3, 1, ` + floorNext + `), ?3 + ?4, nullif(?5, ''))", New: "VALUES (?1, ?2, ` + floorNext + `, ?3 + ?4, nullif(?5, ''))"},
			{File: sqliteQueries, Old: "THEN $L.fence ELSE max($L.fence + 1, excluded.fence) END,", New: "THEN $L.fence ELSE $L.fence + 1 END,"},
		},
		Workloads: []string{"lease-counter"}, Suite: "Lease",
	},
	{
		Name: "postgres/fence-not-floored", Store: "postgres",
		Breaks: "a new tenure's fence is the last one plus one, not floored at the clock: a database restored from an older copy grants fences it granted before",
		Edits: []Edit{{File: pgQueries,
			Old: "SELECT $1, $2, greatest((extract(epoch FROM c.now) * 1000000)::bigint,\n",
			New: "SELECT $1, $2, greatest(\n"}},
		Workloads: []string{"lease-counter"}, Suite: "Lease",
	},
	{
		Name: "redis/fence-not-floored", Store: "redis",
		Breaks: "a new tenure's fence is the last one plus one, not floored at the server's clock: a server that lost its data grants fences it granted before",
		Edits: []Edit{
			{File: redisLua + "acquire.lua",
				Old: "  local f = clock()\n  local fs = string.format('%d', f)\n  local last",
				New: "  local f = 1\n  local fs = string.format('%d', f)\n  local last"},
			{File: redisLua + "release.lua",
				Old: "  local f = now\n",
				New: "  local f = 1\n"},
		},
		Workloads: []string{"lease-counter"}, Suite: "Lease",
	},
	{
		Name: "redis/handover-fence-not-raised", Store: "redis",
		Breaks: "a release that hands a contended key to the first waiter grants it the released holder's fence, not one above it",
		Edits: []Edit{
			{File: redisLua + "release.lua",
				Old: "  local f = now\n",
				New: "  local f = tonumber(redis.call('GET', KEYS[5])) or now\n"},
			{File: redisLua + "release.lua",
				Old: "  if last >= f then\n",
				New: "  if last > f then\n"},
		},
		Workloads: []string{"election"}, Suite: "Lease", Faults: "pause,kill",
	},
	{
		Name: "redis/handover-short-grant", Store: "redis",
		Breaks: "a release that hands a contended key over grants it for a quarter of the TTL the waiter's attempt asked for: the store expires it while the waiter still counts it valid",
		Edits: []Edit{{File: redisLua + "release.lua",
			Old: "math.ceil(left / 1000)",
			New: "math.ceil(left / 4000)"}},
		Workloads: []string{"election"}, Suite: "Lease", Faults: "pause,kill",
	},

	// ---- Liveness: a lease that expired passes on ----
	{
		Name: "postgres/expired-lease-kept", Store: "postgres",
		Breaks: "a lease that expired is never taken over, only a released one: a leader that stalls past its TTL, or dies, leaves the election without a leader for good",
		Edits: []Edit{
			{File: pgQueries, Old: "\tOR (l.token IS NULL OR l.expires_at <= (SELECT now FROM c)) AND NOT l.waiters", New: "\tOR l.token IS NULL AND NOT l.waiters"},
			{File: pgQueries, Old: "\tOR (l.token IS NULL OR l.expires_at <= (SELECT now FROM c))\n", New: "\tOR l.token IS NULL\n"},
			{File: pgQueue, Old: "WHERE l.token IS NULL OR l.expires_at <= (SELECT now FROM c) OR l.token = excluded.token", New: "WHERE l.token IS NULL OR l.token = excluded.token"},
		},
		// The forget fault deletes the records of ended leases, expired
		// ones included, which would hand the dead leader's key on. Kills
		// are left out too: a campaigning worker killed in the middle of
		// its acquire may have been granted the key unseen, so the
		// liveness check moves the term's end to that death and judges
		// the next grant from there. Under the mutant every worker
		// campaigns, so on a loaded machine (whose stalls widen the
		// allowance) each kill moved the window on until it passed the
		// run's end, and a third of the runs judged nothing. A leader
		// paused past its TTL loses its term just as surely, and the
		// check can tell when.
		Workloads: []string{"election"}, Suite: "Lease", Faults: "pause",
	},

	// ---- Fences above reclaimed keys: the fence floor ----
	{
		Name: "memory/fence-floor-ignored", Store: "memory",
		Breaks: "a new tenure's fence ignores the fence floor: a key whose record was swept is granted a fence below one it had, once the clock is behind it",
		Edits: []Edit{{File: memLeases,
			Old: "r.fence = leasedriver.NextFence(max(r.fence, s.floor), now)",
			New: "r.fence = leasedriver.NextFence(r.fence, now)"}},
		Workloads: []string{"fence-floor"}, Suite: "Lease",
	},
	{
		Name: "memory/sweep-floor-not-raised", Store: "memory",
		Breaks: "Sweep drops ended lease records without raising the fence floor to their fences",
		Edits: []Edit{{File: memLeases,
			Old: "\t\ts.floor = max(s.floor, r.fence)\n",
			New: ""}},
		Workloads: []string{"fence-floor"}, Suite: "Lease",
	},
	{
		Name: "sqlite/fence-floor-ignored", Store: "sqlite",
		Breaks: "a new key's fence ignores the fence floor: a key whose row was swept is granted a fence below one it had, once the clock is behind it",
		Edits: []Edit{{File: sqliteQueries,
			Old: "VALUES (?1, ?2, max(?3, 1, ` + floorNext + `), ?3 + ?4, nullif(?5, ''))",
			New: "VALUES (?1, ?2, max(?3, 1), ?3 + ?4, nullif(?5, ''))"}},
		Workloads: []string{"fence-floor"}, Suite: "Lease", CI: true,
	},
	{
		Name: "sqlite/sweep-floor-not-raised", Store: "sqlite",
		Breaks: "Sweep deletes the rows of ended leases without raising the fence floor to their fences",
		Edits: []Edit{{File: sqliteSweep,
			Old: "r.Replace(`UPDATE $P SET fence = max(fence, coalesce(",
			New: "r.Replace(`UPDATE $P SET fence = min(fence, coalesce("}},
		Workloads: []string{"fence-floor"}, Suite: "Lease",
	},
	{
		Name: "postgres/fence-floor-ignored", Store: "postgres",
		Breaks: "a new tenure's fence ignores the fence floor (the grant does not read it, and its inserted row is not checked against it): a key whose row was swept is granted a fence below one it had, once the clock is behind it",
		Edits: []Edit{
			{File: pgQueries, Old: "\t(SELECT ff.fence FROM ` + schema + `.lease_fence_floor AS ff) + 1, 1),", New: "\t1),"},
			{File: pgRecheck, Old: "IF NEW.token IS NOT NULL AND NEW.fence <= (SELECT", New: "IF false AND NEW.fence <= (SELECT"},
		},
		Workloads: []string{"fence-floor"}, Suite: "Lease",
	},
	{
		Name: "postgres/grant-floor-not-rechecked", Store: "postgres",
		Breaks: "an inserted lease row is not checked against the fence floor as committed once it is in: a grant that read the floor before a sweep raised it, and inserted after the key's row was deleted, reuses a dropped fence",
		Edits: []Edit{{File: pgRecheck,
			Old: "IF NEW.token IS NOT NULL AND NEW.fence <= (SELECT",
			New: "IF false AND NEW.fence <= (SELECT"}},
		Workloads: []string{"fence-floor"}, Suite: "Lease",
	},

	{
		Name: "redis/fence-floor-ignored", Store: "redis",
		Breaks: "the acquire script neither reads nor raises its slot's fence floor: a key whose fence key expired is granted a fence below one it had, once the clock is behind it",
		Edits: []Edit{
			{File: redisLua + "acquire.lua",
				Old: "  local floor = tonumber(redis.call('SET', KEYS[6], fs, 'GET')) or 0",
				New: "  local floor = 0"},
			{File: redisLua + "release.lua",
				Old: "  local floor = tonumber(redis.call('SET', KEYS[6], fs, 'GET')) or 0",
				New: "  local floor = 0"},
		},
		Workloads: []string{"fence-floor"}, Suite: "Lease",
	},

	// ---- Idempotency: begin, complete and renew check the claim ----
	{
		Name: "memory/idem-complete-stale-claim", Store: "memory",
		Breaks: "Complete accepts a claim that was taken over: the token and fence are not compared",
		Edits: []Edit{{File: memIdem,
			Old: "if r == nil || r.released || r.token != token || r.fence != fence {",
			New: "if r == nil || r.released {"}},
		Workloads: []string{"idempotency"}, Suite: "Idempotency",
	},
	{
		Name: "memory/idem-mismatch-replayed", Store: "memory",
		Breaks: "Begin replays a record made for another fingerprint instead of reporting a mismatch",
		Edits: []Edit{{File: memIdem,
			Old: "case r.fp != b.Fingerprint:",
			New: "case false:"}},
		Workloads: []string{"idempotency"}, Suite: "Idempotency",
	},
	{
		Name: "memory/idem-renew-any-claim", Store: "memory",
		Breaks: "Renew extends a claim whatever its token and fence",
		Edits: []Edit{{File: memIdem,
			Old: "r.done || r.token != token || r.fence != fence || !r.claimUntil.After(now)",
			New: "r.done || !r.claimUntil.After(now)"}},
		Workloads: []string{"idempotency"}, Suite: "Idempotency",
	},
	{
		Name: "memory/idem-begin-steals-claim", Store: "memory",
		Breaks: "Begin claims a live claim of another token: two executors run at once",
		Edits: []Edit{{File: memIdem,
			Old: "case r.claimUntil.After(now):\n\t\treturn driver.Begun{State: driver.InProgress, TTL: r.claimUntil.Sub(now)}, nil",
			New: "case r.claimUntil.After(now):\n\t\treturn claim(r.fence), nil"}},
		Workloads: []string{"idempotency"}, Suite: "Idempotency", CI: true,
	},
	{
		Name: "sqlite/idem-complete-stale-claim", Store: "sqlite",
		Breaks: "Complete accepts a claim that was taken over: the token and fence are not compared",
		Edits: []Edit{{File: sqliteIdem,
			Old: "WHERE scope = ?1 AND \"key\" = ?2 AND token = ?3 AND fence = ?4 AND state = 1`),",
			New: "WHERE scope = ?1 AND \"key\" = ?2 AND ?3 = ?3 AND ?4 = ?4 AND state = 1`),"}},
		Workloads: []string{"idempotency"}, Suite: "Idempotency",
	},
	{
		Name: "sqlite/idem-mismatch-replayed", Store: "sqlite",
		Breaks: "Begin replays a record made for another fingerprint instead of reporting a mismatch",
		Edits: []Edit{{File: sqliteIdem,
			Old: "case r.fp != b.Fingerprint:",
			New: "case false:"}},
		Workloads: []string{"idempotency"}, Suite: "Idempotency",
	},
	{
		Name: "sqlite/idem-renew-any-claim", Store: "sqlite",
		Breaks: "Renew extends a claim whatever its token and fence",
		Edits: []Edit{{File: sqliteIdem,
			Old: "AND token = ?3 AND fence = ?4 AND state = 1 AND claim_us > ?5",
			New: "AND ?3 = ?3 AND ?4 = ?4 AND state = 1 AND claim_us > ?5"}},
		Workloads: []string{"idempotency"}, Suite: "Idempotency",
	},
	{
		Name: "sqlite/idem-begin-steals-claim", Store: "sqlite",
		Breaks: "Begin claims a live claim of another token: two executors run at once",
		Edits: []Edit{{File: sqliteIdem,
			Old: "case r.claimUS.Int64 > now:\n\t\treturn driver.Begun{State: driver.InProgress,",
			New: "case r.claimUS.Int64 > now:\n\t\treturn claim(r.fence)\n\t\treturn driver.Begun{State: driver.InProgress,"}},
		Workloads: []string{"idempotency"}, Suite: "Idempotency",
	},
	{
		Name: "postgres/idem-complete-stale-claim", Store: "postgres",
		Breaks: "Complete accepts a claim that was taken over: the token and fence are not compared",
		Edits: []Edit{{File: pgIdem,
			Old: "WHERE r.scope = $1 AND r.key = $2 AND r.token = $3 AND r.fence = $4 AND r.state IN (1, 2)",
			New: "WHERE r.scope = $1 AND r.key = $2 AND $3::text IS NOT NULL AND $4::bigint > 0 AND r.state IN (1, 2)"}},
		Workloads: []string{"idempotency"}, Suite: "Idempotency",
	},
	{
		Name: "postgres/idem-mismatch-replayed", Store: "postgres",
		Breaks: "Begin replays a record made for another fingerprint instead of reporting a mismatch",
		Edits: []Edit{{File: pgIdem,
			Old: "case *r.fp != b.Fingerprint:",
			New: "case false:"}},
		Workloads: []string{"idempotency"}, Suite: "Idempotency",
	},
	{
		Name: "postgres/idem-renew-any-claim", Store: "postgres",
		Breaks: "Renew extends a claim whatever its token and fence",
		Edits: []Edit{{File: pgIdem,
			Old: "AND r.token = $3 AND r.fence = $4 AND r.state = 1 AND r.claim_until > c.now",
			New: "AND $3::text IS NOT NULL AND $4::bigint > 0 AND r.state = 1 AND r.claim_until > c.now"}},
		Workloads: []string{"idempotency"}, Suite: "Idempotency",
	},
	{
		Name: "postgres/idem-begin-steals-claim", Store: "postgres",
		Breaks: "Begin claims a live claim of another token: two executors run at once",
		Edits: []Edit{
			{File: pgIdem, Old: "AND (cur.token = $4 OR ($7 AND cur.claim_until <= c.now))))", New: "AND (cur.token = $4 OR ($7 OR true))))"},
			{File: pgIdem, Old: "AND (r.token = excluded.token OR ($7 AND r.claim_until <= (SELECT now FROM c))))", New: "AND (r.token = excluded.token OR ($7 OR true)))"},
		},
		Workloads: []string{"idempotency"}, Suite: "Idempotency",
	},
	{
		Name: "redis/idem-complete-stale-claim", Store: "redis",
		Breaks: "Complete accepts a claim that was taken over: the token and fence are not compared",
		Edits: []Edit{{File: redisLua + "idempotency_complete.lua",
			Old: "if r[1] ~= tok or r[2] ~= f then",
			New: "if false then"}},
		Workloads: []string{"idempotency"}, Suite: "Idempotency",
	},
	{
		Name: "redis/idem-mismatch-replayed", Store: "redis",
		Breaks: "Begin replays a record made for another fingerprint instead of reporting a mismatch",
		Edits: []Edit{{File: redisLua + "idempotency_begin.lua",
			Old: "if r[1] ~= fp then",
			New: "if false then"}},
		Workloads: []string{"idempotency"}, Suite: "Idempotency",
	},
	{
		Name: "redis/idem-renew-any-claim", Store: "redis",
		Breaks: "Renew extends a claim whatever its token and fence",
		Edits: []Edit{{File: redisLua + "idempotency_renew.lua",
			Old: "if r[1] ~= tok or r[2] ~= f or r[3] ~= '1'",
			New: "if r[3] ~= '1'"}},
		Workloads: []string{"idempotency"}, Suite: "Idempotency",
	},
	{
		Name: "redis/idem-begin-steals-claim", Store: "redis",
		Breaks: "Begin claims a live claim of another token: two executors run at once",
		Edits: []Edit{{File: redisLua + "idempotency_begin.lua",
			Old: "if cu > now then\n  return {3, cu - now}",
			New: "if cu > now then\n  return claim(tonumber(r[3]))"}},
		Workloads: []string{"idempotency"}, Suite: "Idempotency",
	},

	// ---- Sessions: Save and Touch check the version; revocation sticks ----
	{
		Name: "memory/session-save-ignores-version", Store: "memory",
		Breaks: "Save writes over a newer version (lost update)",
		Edits: []Edit{{File: memSessions,
			Old: "r, err := st.current(id, version, now)\n\tif err != nil {\n\t\treturn session.Record{}, err\n\t}\n\tr.Data = slices.Clone(data)",
			New: "r := st.live(id, now)\n\tif r == nil {\n\t\treturn session.Record{}, session.ErrNotFound\n\t}\n\tr.Data = slices.Clone(data)"}},
		Workloads: []string{"session-saves"}, Suite: "Session",
	},
	{
		Name: "memory/session-touch-ignores-version", Store: "memory",
		Breaks: "Touch refreshes a session at another version",
		Edits: []Edit{{File: memSessions,
			Old: "r, err := st.current(id, version, now)\n\tif err != nil {\n\t\treturn time.Time{}, err\n\t}",
			New: "r := st.live(id, now)\n\tif r == nil {\n\t\treturn time.Time{}, session.ErrNotFound\n\t}"}},
		Workloads: []string{"session-saves"}, Suite: "Session",
	},
	{
		Name: "memory/session-revoke-misses-saved", Store: "memory",
		Breaks: "revoking a user's sessions leaves those saved since they were created",
		Edits: []Edit{{File: memSessions,
			Old: "if r := st.recs[id]; r != nil {\n\t\t\tif r.Live(now) {\n\t\t\t\tn++",
			New: "if r := st.recs[id]; r != nil && r.Version == 1 {\n\t\t\tif r.Live(now) {\n\t\t\t\tn++"}},
		Workloads: []string{"session"}, Suite: "Session",
	},
	{
		Name: "sqlite/session-save-ignores-version", Store: "sqlite",
		Breaks: "Save writes over a newer version (lost update): `version = ?4` made always true",
		Edits: []Edit{{File: sqliteSessions,
			Old: "version = version + 1, idle_us = min(?2 + ?3, absolute_us)\n\t\t\tWHERE id = ?1 AND version = ?4",
			New: "version = version + 1, idle_us = min(?2 + ?3, absolute_us)\n\t\t\tWHERE id = ?1 AND ?4 = ?4"}},
		Workloads: []string{"session-saves"}, Suite: "Session",
	},
	{
		Name: "sqlite/session-touch-ignores-version", Store: "sqlite",
		Breaks: "Touch refreshes a session at another version",
		Edits: []Edit{{File: sqliteSessions,
			Old: "WHERE id = ?1 AND version = ?4 AND ` + live + ` RETURNING idle_us`",
			New: "WHERE id = ?1 AND ?4 = ?4 AND ` + live + ` RETURNING idle_us`"}},
		Workloads: []string{"session-saves"}, Suite: "Session",
	},
	{
		Name: "sqlite/session-revoke-misses-saved", Store: "sqlite",
		Breaks: "revoking a user's sessions leaves those saved or rotated since they were created",
		Edits: []Edit{{File: sqliteSessions,
			Old: "delUser: r.Replace(`DELETE FROM $T WHERE user_id = ?1 RETURNING `",
			New: "delUser: r.Replace(`DELETE FROM $T WHERE user_id = ?1 AND version = 1 RETURNING `"}},
		Workloads: []string{"session"}, Suite: "Session",
	},
	{
		Name: "postgres/session-save-ignores-version", Store: "postgres",
		Breaks: "Save writes over a newer version (lost update)",
		Edits: []Edit{{File: pgSessions,
			Old: "WHERE s.id = $1 AND s.version = $3 AND ` + live + ` RETURNING ` + cols,",
			New: "WHERE s.id = $1 AND $3::bigint > 0 AND ` + live + ` RETURNING ` + cols,"}},
		Workloads: []string{"session-saves"}, Suite: "Session", CI: true,
	},
	{
		Name: "postgres/session-touch-ignores-version", Store: "postgres",
		Breaks: "Touch refreshes a session at another version",
		Edits: []Edit{{File: pgSessions,
			Old: "WHERE s.id = $1 AND s.version = $3 AND ` + live + ` RETURNING s.idle_until`,",
			New: "WHERE s.id = $1 AND $3::bigint > 0 AND ` + live + ` RETURNING s.idle_until`,"}},
		Workloads: []string{"session-saves"}, Suite: "Session",
	},
	{
		Name: "postgres/session-revoke-misses-saved", Store: "postgres",
		Breaks: "revoking a user's sessions leaves those saved or rotated since they were created",
		Edits: []Edit{{File: pgSessions,
			Old: "d AS (DELETE FROM ` + t + ` WHERE user_id = $1 RETURNING",
			New: "d AS (DELETE FROM ` + t + ` WHERE user_id = $1 AND version = 1 RETURNING"}},
		Workloads: []string{"session"}, Suite: "Session",
	},
	{
		Name: "redis/session-save-ignores-version", Store: "redis",
		Breaks: "Save writes over a newer version (lost update)",
		Edits: []Edit{{File: redisLua + "session_save.lua",
			Old: "if v ~= version then",
			New: "if v ~= version and ARGV[3] == '0' then"}},
		Workloads: []string{"session-saves"}, Suite: "Session",
	},
	{
		Name: "redis/session-touch-ignores-version", Store: "redis",
		Breaks: "Touch refreshes a session at another version",
		Edits: []Edit{{File: redisLua + "session_save.lua",
			Old: "if v ~= version then",
			New: "if v ~= version and ARGV[3] == '1' then"}},
		Workloads: []string{"session-saves"}, Suite: "Session",
	},
	{
		Name: "redis/session-rotate-escapes-revoke", Store: "redis",
		Breaks: "Rotate ignores a revoke of the user's sessions in progress: the rotated session escapes the revocation",
		Edits: []Edit{{File: redisLua + "session_rotate.lua",
			Old: "if redis.call('ZCOUNT', KEYS[4], r[3], '+inf') > 0 then",
			New: "if false then"}},
		Workloads: []string{"session"}, Suite: "Session",
	},
	{
		Name: "redis/sessionset-unchecked", Store: "redis",
		Breaks: "SessionSet writes without checking the session: a sensitive write lands after the logout (revoked, rotated away or expired session)",
		Edits: []Edit{{File: redisLua + "session_set.lua",
			Old: "if not live then",
			New: "if false then"}},
		Workloads: []string{"session-commit"}, Suite: "Session",
	},

	// ---- Sessions: the check at a sensitive commit ----
	{
		Name: "memory/session-check-not-held", Store: "memory",
		Breaks: "WithSession lets a revoke run while fn commits: the check does not hold until the commit",
		Edits: []Edit{{File: memSessions,
			Old: "\treturn fn()\n}",
			New: "\tst.mu.Unlock()\n\tdefer st.mu.Lock()\n\treturn fn()\n}"}},
		Workloads: []string{"session-commit"}, Suite: "Session",
	},
	{
		Name: "sqlite/session-check-any", Store: "sqlite",
		Breaks: "CheckSession passes a session that ended (revoked, rotated away, expired)",
		Edits: []Edit{{File: sqliteSessions,
			Old: "return fmt.Errorf(\"sqlitestore: check session: %w\", session.ErrNotFound)",
			New: "return nil"}},
		Workloads: []string{"session-commit"}, Suite: "Session",
	},
	{
		Name: "postgres/session-check-not-locked", Store: "postgres",
		Breaks: "CheckSession reads the session row without locking it: a revoke commits while the transaction is open",
		Edits: []Edit{{File: pgSessions,
			Old: "+ live + ` FOR SHARE OF s`,",
			New: "+ live,"}},
		Workloads: []string{"session-commit"}, Suite: "Session", CI: true,
	},

	// ---- Schedules: the ledger's (job, slot) uniqueness; a stale
	// completion is refused ----
	{
		Name: "memory/schedule-ledger-not-unique", Store: "memory",
		Breaks: "CompleteSlot completes a slot the ledger already has",
		Edits: []Edit{{File: memSched,
			Old: "if _, done := st.ledger[slot.Job][slot.ID]; done {",
			New: "if _, done := st.ledger[slot.Job][slot.ID]; done && false {"}},
		Workloads: []string{"schedule"}, Suite: "Schedule/FakeClock",
	},
	{
		Name: "memory/schedule-stale-completion", Store: "memory",
		Breaks: "CompleteSlot accepts an attempt whose claim is no longer current",
		Edits: []Edit{{File: memSched,
			Old: "if lr == nil || lr.token != l.Token().Reveal() || lr.fence != l.Fence() || !lr.expires.After(now) {",
			New: "if lr == nil {"}},
		Workloads: []string{"schedule"}, Suite: "Schedule/FakeClock",
	},
	{
		Name: "sqlite/schedule-ledger-not-unique", Store: "sqlite",
		Breaks: "CompleteSlot completes a slot the ledger already has",
		Edits: []Edit{{File: sqliteSched,
			Old: "err := tx.QueryRowContext(ctx, q.inLedger, slot.Job, slot.ID).Scan(&one)",
			New: "err := error(sql.ErrNoRows)"}},
		Workloads: []string{"schedule"}, Suite: "Schedule/FakeClock",
	},
	{
		Name: "sqlite/schedule-stale-completion", Store: "sqlite",
		Breaks: "CompleteSlot accepts an attempt whose claim is no longer current",
		Edits: []Edit{{File: sqliteSched,
			Old: "err = tx.QueryRowContext(ctx, s.q.holder, key, l.Token().Reveal(), int64(l.Fence()), now).Scan(&one)",
			New: "err = nil"}},
		Workloads: []string{"schedule"}, Suite: "Schedule/FakeClock",
	},
	{
		Name: "postgres/schedule-ledger-not-unique", Store: "postgres",
		Breaks: "CompleteSlot completes a slot the ledger already has",
		Edits: []Edit{{File: pgSched,
			Old: "SELECT $4, $5, $3, c.now FROM h, c ON CONFLICT DO NOTHING RETURNING 1),",
			New: "SELECT $4, $5, $3, c.now FROM h, c ON CONFLICT (job, slot_id) DO UPDATE SET fence = excluded.fence RETURNING 1),"}},
		Workloads: []string{"schedule"}, Suite: "Schedule/FakeClock",
	},
	{
		Name: "postgres/schedule-stale-completion", Store: "postgres",
		Breaks: "CompleteSlot accepts an attempt whose claim is no longer current",
		Edits: []Edit{{File: pgSched,
			Old: "WHERE l.key = $1 AND l.token = $2 AND l.fence = $3 AND l.expires_at > c.now FOR UPDATE OF l),",
			New: "WHERE l.key = $1 AND $2::text IS NOT NULL AND $3::bigint > 0 FOR UPDATE OF l),"}},
		Workloads: []string{"schedule"}, Suite: "Schedule/FakeClock",
	},
	{
		Name: "redis/schedule-ledger-not-unique", Store: "redis",
		Breaks: "CompleteSlot completes a slot the ledger already has",
		Edits: []Edit{{File: redisLua + "schedule_complete.lua",
			Old: "if redis.call('HEXISTS', KEYS[4], id) == 1 then",
			New: "if false then"}},
		Workloads: []string{"schedule"}, Suite: "Schedule",
	},
	{
		Name: "redis/schedule-stale-completion", Store: "redis",
		Breaks: "CompleteSlot accepts an attempt whose claim is no longer current",
		Edits: []Edit{{File: redisLua + "schedule_complete.lua",
			Old: "if redis.call('GET', KEYS[1]) ~= token or redis.call('GET', KEYS[2]) ~= f then",
			New: "if false then"}},
		Workloads: []string{"schedule"}, Suite: "Schedule",
	},

	// ---- Rate limits: one decision reads and writes atomically; permit
	// counts hold ----
	{
		Name: "memory/ratelimit-decide-not-atomic", Store: "memory",
		Breaks: "a decision reads the key's state, lets go of the lock, and writes later: concurrent decisions admit past the limit",
		Edits: []Edit{
			{File: memLimits,
				Old: "\tvar st *driver.State\n\tif sl != nil {\n\t\tst = &sl.st\n\t}\n\td, next := driver.EvaluateOne(now, &r, st, commit)\n",
				New: "\tvar st *driver.State\n\tif sl != nil {\n\t\tcp := sl.st\n\t\tst = &cp\n\t}\n\tsh.mu.Unlock()\n\ttime.Sleep(time.Millisecond)\n\td, next := driver.EvaluateOne(now, &r, st, commit)\n\tsh.mu.Lock()\n"},
		},
		Workloads: []string{"ratelimit"}, Suite: "RateLimit",
	},
	{
		Name: "memory/permit-count-plus-one", Store: "memory",
		Breaks: "AcquirePermit grants one permit more than the limit",
		Edits: []Edit{{File: memLimits,
			Old: "g, st := driver.EvaluateAcquire(now, sh.get(&key, h, us), id, permits, ttl)",
			New: "g, st := driver.EvaluateAcquire(now, sh.get(&key, h, us), id, permits+1, ttl)"}},
		Workloads: []string{"permits"}, Suite: "RateLimit",
	},
	{
		Name: "sqlite/ratelimit-decide-not-atomic", Store: "sqlite",
		Breaks: "a decision reads the key's state before it takes the write lock and writes under it: concurrent decisions admit past the limit",
		Edits: []Edit{{File: sqliteLimits,
			Old: "\terr := l.write(ctx, \"decide\", key0, func(tx *sql.Tx, now int64) error {\n\t\td, next, err := eval(tx, now)",
			New: "\tpd, pnext, perr := eval(l.s.db, l.s.nowUS())\n\terr := l.write(ctx, \"decide\", key0, func(tx *sql.Tx, now int64) error {\n\t\td, next, err := pd, pnext, perr"}},
		Workloads: []string{"ratelimit"}, Suite: "RateLimit",
	},
	{
		Name: "sqlite/permit-count-plus-one", Store: "sqlite",
		Breaks: "AcquirePermit grants one permit more than the limit",
		Edits: []Edit{{File: sqliteLimits,
			Old: "g, next = driver.EvaluateAcquire(time.UnixMicro(now), st, id, permits, ttl)",
			New: "g, next = driver.EvaluateAcquire(time.UnixMicro(now), st, id, permits+1, ttl)"}},
		Workloads: []string{"permits"}, Suite: "RateLimit",
	},
	{
		Name: "postgres/ratelimit-decide-not-atomic", Store: "postgres",
		Breaks: "a decision does not take the key's lock: concurrent decisions read the same state and admit past the limit",
		Edits: []Edit{{File: pgMigrations,
			Old: "\t\tIF do_commit THEN\n\t\t\tPERFORM pg_advisory_xact_lock(h);",
			New: "\t\tIF do_commit THEN\n\t\t\tPERFORM 1;"}},
		Workloads: []string{"ratelimit"}, Suite: "RateLimit",
	},
	{
		Name: "postgres/permit-count-plus-one", Store: "postgres",
		Breaks: "AcquirePermit grants one permit more than the limit",
		Edits: []Edit{{File: pgMigrations,
			Old: "ELSIF coalesce(array_length(ids, 1), 0) >= permits THEN",
			New: "ELSIF coalesce(array_length(ids, 1), 0) > permits THEN"}},
		Workloads: []string{"permits"}, Suite: "RateLimit",
	},
	{
		Name: "redis/ratelimit-slog-over-admits", Store: "redis",
		Breaks: "the sliding log admits one request more than its rate per period",
		Edits: []Edit{{File: redisLua + "ratelimit_decide.lua",
			Old: "  if newest > ts then ts = newest end\n  r.allowed = count + n <= R",
			New: "  if newest > ts then ts = newest end\n  r.allowed = count + n <= R + 1"}},
		Workloads: []string{"ratelimit"}, Suite: "RateLimit",
	},
	{
		Name: "redis/permit-count-plus-one", Store: "redis",
		Breaks: "AcquirePermit grants one permit more than the limit",
		Edits: []Edit{{File: redisLua + "ratelimit_permit.lua",
			Old: "if inuse >= permits then",
			New: "if inuse > permits then"}},
		Workloads: []string{"permits"}, Suite: "RateLimit",
	},
}
