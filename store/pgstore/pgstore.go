package pgstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"github.com/tenurekit/tenure"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenurekit/tenure/internal/wakehub"
	"github.com/tenurekit/tenure/lease"
)

// DefaultSchema is the schema that holds tenure's tables unless
// Options.Schema names another.
const DefaultSchema = "tenure"

// maxIdentLen is PostgreSQL's limit on identifiers (NAMEDATALEN-1).
const maxIdentLen = 63

// Options configure a Store. Nil, and the zero value of each field, mean
// the defaults. [New] and [NewDB] refuse a value out of its bounds with an
// error wrapping tenure.ErrInvalid.
type Options struct {
	// Schema is the schema that holds tenure's tables (leases, fences). It
	// must be a plain lower-case identifier: a letter or underscore, then
	// letters, digits or underscores, at most 63 bytes, not starting with
	// "pg_". Default (empty) "tenure" (DefaultSchema).
	Schema string

	// UnloggedLeases keeps the leases table UNLOGGED: its writes skip the
	// write-ahead log, which makes each Acquire, Renew and Release
	// cheaper, and PostgreSQL empties the table when it recovers from a
	// crash (a clean shutdown keeps it) and does not replicate it to
	// standbys. After such a crash every lease is free, and the fence of
	// the next grant of a key is still above every fence granted before,
	// because fences are floored at the server's clock in microseconds
	// (as long as the clock does not step back across the crash) and at
	// the fence floor of the rows Sweep dropped. The fence floor, the
	// fence guards' table (Admit) and every other table stay logged.
	//
	// It is part of the schema, not of the requests: [Store.Migrate]
	// makes the table UNLOGGED or LOGGED to match (ALTER TABLE ... SET
	// UNLOGGED / SET LOGGED, which rewrites the table under an exclusive
	// lock), and [Store.Check] (and so [Open]) reports a table whose
	// persistence differs with an error wrapping [ErrLeasesPersistence].
	// Every Store on a schema should use the same value. Default false: a
	// logged table, whose leases survive a crash and are replicated.
	UnloggedLeases bool
}

// Store keeps tenure's state in PostgreSQL, through a pgx pool ([New]) or
// a database/sql database ([NewDB]); both behave the same. It is safe for
// concurrent use. Create its tables with [Store.Migrate].
type Store struct {
	views  // per-primitive state; see views.go
	db     conn
	schema string
	q      queries
	qq     queueQueries
	wakeCh string            // the NOTIFY channel of lease wake-ups
	wakes  *listener         // the watchers of keys and their connection
	hot    wakehub.Contended // the keys seen contended lately

	unlogged bool // Options.UnloggedLeases

	sweepMu    sync.Mutex
	sweepAfter string        // the lease key the next Sweep scans after
	sweepWhole bool          // the current round of the lease scan began at the first key
	sweepRet   time.Duration // the FenceRetention of the current round
}

// queries are the statements of a Store, built once for its schema. pgx
// (also through its database/sql driver) prepares each one per connection
// on first use and caches it.
type queries struct {
	acquire, acquireChecked, refused    string
	renew, release, inspect             string
	admitStrict, admitAtLeast, admitted string
	checkHolder, list                   string
}

// New returns a Store on pool using the schema in o (nil: defaults). A nil
// pool or a bad option (see [Options]) is an error wrapping
// tenure.ErrInvalid. New does not touch the database; call [Store.Migrate]
// once to create the tables.
func New(pool *pgxpool.Pool, o *Options) (*Store, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: pgstore: nil *pgxpool.Pool", tenure.ErrInvalid)
	}
	s, err := newStore(pgxQ{pool}, o)
	if err == nil {
		s.wakes.session = poolSession(pool)
	}
	return s, err
}

// NewDB returns a Store on db, a database/sql handle to PostgreSQL opened
// with any driver (pgx's stdlib driver "pgx", lib/pq "postgres"), using the
// schema in o (nil: defaults). It runs the same statements as a Store made
// by [New] and behaves the same. A nil db or a bad option (see [Options])
// is an error wrapping tenure.ErrInvalid. NewDB does not touch the
// database; call [Store.Migrate] once to create the tables.
func NewDB(db *sql.DB, o *Options) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: pgstore: nil *sql.DB", tenure.ErrInvalid)
	}
	s, err := newStore(sqlDBConn{sqlQ{db}, db}, o)
	if err == nil {
		s.wakes.session = dbSession(db)
	}
	return s, err
}

func newStore(c conn, o *Options) (*Store, error) {
	s := &Store{db: c, schema: DefaultSchema}
	if o != nil && o.Schema != "" {
		s.schema = o.Schema
	}
	if o != nil {
		s.unlogged = o.UnloggedLeases
	}
	if err := validateSchema(s.schema); err != nil {
		return nil, err
	}
	s.q = buildQueries(pgx.Identifier{s.schema}.Sanitize())
	s.qq = buildQueueQueries(pgx.Identifier{s.schema}.Sanitize())
	s.wakeCh = wakeChannel(s.schema)
	s.wakes = &listener{channel: s.wakeCh}
	return s, nil
}

// Schema returns the schema that holds the Store's tables.
func (s *Store) Schema() string { return s.schema }

// validateSchema accepts plain lower-case identifiers only, so the quoted
// name the Store uses and the unquoted name a person types are the same.
func validateSchema(name string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: pgstore: schema name %q %s", tenure.ErrInvalid, name, why)
	}
	if len(name) > maxIdentLen {
		return bad(fmt.Sprintf("is longer than %d bytes", maxIdentLen))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c == '_':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return bad("must be a lower-case identifier: a letter or underscore, then letters, digits or underscores")
		}
	}
	if strings.HasPrefix(name, "pg_") {
		return bad(`starts with "pg_", which PostgreSQL reserves for system schemas`)
	}
	return nil
}

// grantInsert is the acquire's insert of a lease row, $1 key, $2 token,
// $3 ttl (µs), $4 holder, on c.now, in schema: the row carries the least
// fence of a new tenure, above both the clock in microseconds and the
// fence floor (lease_fence_floor, the greatest fence of a row Sweep
// dropped), which grantConflict compares with the key's last fence. The
// floor is read in the grant's own statement and never written by it, so
// grants of different keys do not wait for each other. A WHERE may follow
// it (the queued acquire's).
func grantInsert(schema string) string {
	return `INSERT INTO ` + schema + `.leases AS l (key, token, fence, expires_at, holder)
SELECT $1, $2, greatest((extract(epoch FROM c.now) * 1000000)::bigint,
	(SELECT ff.fence FROM ` + schema + `.lease_fence_floor AS ff) + 1, 1),
	c.now + $3::bigint * interval '1 microsecond', nullif($4::text, '') FROM c`
}

// grantConflict takes over a conflicting lease row: the same token within
// its validity keeps its fence, every other takeover starts a new tenure
// above the last fence, the fence floor and the clock
// (lease/driver.NextFence, with the floor). The WHERE that says who may
// take it over follows.
const grantConflict = `ON CONFLICT (key) DO UPDATE SET
	fence = CASE WHEN l.token = excluded.token AND l.expires_at > (SELECT now FROM c) THEN l.fence
		ELSE greatest(l.fence + 1, excluded.fence) END,
	token = excluded.token,
	expires_at = excluded.expires_at,
	holder = excluded.holder`

func buildQueries(schema string) queries {
	leases := schema + ".leases"
	fences := schema + ".fences"
	waiters := schema + ".lease_waiters"
	// Every lease statement reads the clock once (c.now): expiry and the
	// clock's part of a new fence are judged on that single reading of the
	// server's clock.
	// clock_timestamp(), not now(): now() is the start of the transaction.
	const clock = `WITH c AS (SELECT clock_timestamp() AS now) `
	// remaining is the holder's time left in microseconds (0 when free).
	const remaining = `CASE WHEN l.token IS NOT NULL AND l.expires_at > c.now
		THEN ((extract(epoch FROM l.expires_at) - extract(epoch FROM c.now)) * 1000000)::bigint
		ELSE 0 END`
	return queries{
		// The inserted row carries the least fence of a new tenure (above
		// the clock in microseconds and the fence floor) in
		// excluded.fence. A conflicting row is taken over when it is
		// free, expired, or held by the same token; the same token within
		// its validity keeps its fence and is renewed to ttl, every other
		// takeover starts a new tenure whose fence is above the last
		// fence too (lease/driver.NextFence, with the floor). A
		// free key with live waiters queued goes to the first of them
		// (AcquireQueued), not to a plain acquire: a row whose waiters
		// hint is on is refused here, and acquireChecked asks the queue.
		// A key nobody waits for never reads the queue.
		acquire: clock + grantInsert(schema) + `
` + grantConflict + `
WHERE l.token = excluded.token AND l.expires_at > (SELECT now FROM c)
	OR (l.token IS NULL OR l.expires_at <= (SELECT now FROM c)) AND NOT l.waiters
RETURNING l.fence`,
		// acquireChecked is acquire for a free row whose waiters hint is
		// on: it asks the queue itself, and clears the hint with a grant
		// (the same token's renewal keeps it).
		acquireChecked: clock + grantInsert(schema) + `
` + grantConflict + `,
	waiters = l.waiters AND l.token = excluded.token AND l.expires_at > (SELECT now FROM c)
WHERE l.token = excluded.token AND l.expires_at > (SELECT now FROM c)
	OR (l.token IS NULL OR l.expires_at <= (SELECT now FROM c))
	AND NOT EXISTS (SELECT 1 FROM ` + waiters + ` AS w WHERE w.key = $1 AND w.stay_until > (SELECT now FROM c))
RETURNING l.fence`,
		// $1 key: the holder's time left and description, and how many
		// live waiters are queued, for an acquire that was refused.
		refused: clock + `SELECT coalesce((SELECT ` + remaining + ` FROM ` + leases + ` AS l WHERE l.key = $1), 0),
	coalesce((SELECT CASE WHEN l.token IS NOT NULL AND l.expires_at > c.now THEN l.holder END FROM ` + leases + ` AS l WHERE l.key = $1), ''),
	(SELECT count(*) FROM ` + waiters + ` AS w WHERE w.key = $1 AND w.stay_until > c.now)
FROM c`,
		// $1 key, $2 token. Release keeps the row and its fence, so the
		// next tenure's fence follows this one and Inspect reports the
		// last fence until Sweep drops the row, and the time the lease
		// ended in expires_at, from which the row's retention counts. It
		// never writes the fence floor (Sweep raises it). It returns the
		// waiters hint: when on, the store wakes the first waiter with a
		// statement of its own (queueQueries.wake).
		release: clock + `UPDATE ` + leases + ` AS l SET token = NULL, holder = NULL, expires_at = c.now FROM c
WHERE l.key = $1 AND l.token = $2 AND l.expires_at > c.now RETURNING l.waiters`,
		renew: clock + `UPDATE ` + leases + ` AS l SET expires_at = c.now + $3::bigint * interval '1 microsecond' FROM c
WHERE l.key = $1 AND l.token = $2 AND l.expires_at > c.now
RETURNING l.fence`,
		inspect: clock + `SELECT l.fence, ` + remaining + `, CASE WHEN l.token IS NOT NULL AND l.expires_at > c.now THEN coalesce(l.holder, '') ELSE '' END
FROM ` + leases + ` AS l, c WHERE l.key = $1`,

		admitStrict: `INSERT INTO ` + fences + ` AS f (resource, fence) VALUES ($1, $2)
ON CONFLICT (resource) DO UPDATE SET fence = excluded.fence WHERE f.fence < excluded.fence
RETURNING f.fence`,
		admitAtLeast: `INSERT INTO ` + fences + ` AS f (resource, fence) VALUES ($1, $2)
ON CONFLICT (resource) DO UPDATE SET fence = excluded.fence WHERE f.fence <= excluded.fence
RETURNING f.fence`,
		admitted: `SELECT fence FROM ` + fences + ` WHERE resource = $1`,

		// $1 prefix, $2 after, $3 limit; byte order (COLLATE "C").
		list: clock + `SELECT l.key, l.fence, ` + remaining + `, CASE WHEN l.token IS NOT NULL AND l.expires_at > c.now THEN coalesce(l.holder, '') ELSE '' END
FROM ` + leases + ` AS l, c
WHERE l.key COLLATE "C" >= $1 COLLATE "C" AND left(l.key, length($1)) = $1 AND l.key COLLATE "C" > $2 COLLATE "C"
ORDER BY l.key COLLATE "C" LIMIT $3`,

		checkHolder: `SELECT l.fence FROM ` + leases + ` AS l
WHERE l.key = $1 AND l.token = $2 AND l.fence = $3 AND l.expires_at > clock_timestamp()
FOR UPDATE`,
	}
}

// wrap classifies err from a request: transport failures, timeouts and
// context errors wrap lease.ErrUnavailable (the outcome of a write is
// unknown); errors the server reported are returned with context.
func (s *Store) wrap(ctx context.Context, op string, err error) error {
	if unavailable(ctx, err) {
		return fmt.Errorf("pgstore: %s: %w: %w", op, lease.ErrUnavailable, err)
	}
	if code := sqlState(err); code == "42P01" || code == "3F000" {
		// undefined_table, invalid_schema_name
		return fmt.Errorf("pgstore: %s: tables missing in schema %q (run Migrate): %w", op, s.schema, err)
	}
	return fmt.Errorf("pgstore: %s: %w", op, err)
}

// unavailable reports whether err means the server could not be reached
// or did not answer in time.
func unavailable(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	if pgconn.Timeout(err) {
		return true
	}
	if code := sqlState(err); code != "" {
		switch {
		case strings.HasPrefix(code, "08"): // connection exception
			return true
		case strings.HasPrefix(code, "57P"): // admin/crash shutdown, cannot connect now, ...
			return true
		case code == "57014": // query_canceled (statement_timeout or a cancel request)
			return true
		case code == "53300": // too_many_connections
			return true
		case code == "25P03": // idle_in_transaction_session_timeout
			return true
		}
		return false
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	return errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, sql.ErrConnDone) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed)
}

// sqlState returns the SQLSTATE code of an error the server reported,
// whichever driver carried it (pgx's *pgconn.PgError, lib/pq's *pq.Error
// and others with a SQLState method), or "".
func sqlState(err error) string {
	var se interface{ SQLState() string }
	if errors.As(err, &se) {
		return se.SQLState()
	}
	return ""
}
