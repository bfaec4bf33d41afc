package sqlitestore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"time"

	sqlite "modernc.org/sqlite"

	"github.com/tenurekit/tenure/internal/wakehub"
)

// SQLite has one write lock per database file. Writers that find it taken
// wait in SQLite's busy handler, which sleeps between tries (1 ms growing
// to 100 ms) and lets whoever tries at the right instant take the lock: a
// writer that has waited long is overtaken by newcomers, and one whose
// sleeps keep missing the gaps between other writers' transactions can
// wait until its context or the busy timeout ends. Under a steady stream
// of short writes (lease renewals, slot bookkeeping, idempotency and
// session writes) a scheduled job's completion in the caller's own
// transaction could lose every race for the lock until the slot's claim
// ran out, and a renewal could wait behind new work until its grant's
// validity ended.
//
// So the writers of one database file in this process take turns in Go,
// in one queue, before they ask SQLite for the lock: every write
// transaction on a database from Open (the store's own and the caller's,
// begun on Store.DB, from every Store of the process on that file), and
// the store's own writes on a database from New. The queue serves waiters
// in arrival order, with one exception: the renewal or release of a grant
// (a lease, a slot's claim, an idempotency claim, a permit) goes ahead,
// because it has a deadline (the grant's validity) and a late one loses
// work already under way. A grant does not lose validity to the queue
// either: its ttl counts from when the store applied it, and the store
// reports the wait on top (see Store.applyTime). SQLite's busy handler then only
// arbitrates between processes, and with transactions begun on a
// database that did not come from Open.

// lane is a writer's place in the queue. A turn goes to the first waiter
// of the grant lane, else to the first of the normal lane.
type lane int

const (
	laneNormal lane = iota // everything else, the caller's transactions included
	laneGrant              // the renewal or release of a grant in use
)

// lanesByPriority orders the lanes.
var lanesByPriority = [...]lane{laneGrant, laneNormal}

// laneKey is the context key that carries a store write's lane to the
// queue of Open's database.
type laneKey struct{}

func withLane(ctx context.Context, l lane) context.Context {
	if l == laneNormal {
		return ctx
	}
	return context.WithValue(ctx, laneKey{}, l)
}

func laneOf(ctx context.Context) lane {
	l, _ := ctx.Value(laneKey{}).(lane)
	return l
}

// queueWait bounds how long a turn may stay with one writer while others
// wait, as SQLite's busy timeout bounds the wait for a lock that one
// writer holds (DSNParams): a waiter whose queue has not moved for this
// long gets errQueueTimeout, as it would get SQLITE_BUSY from SQLite. A
// queue that keeps moving is waited for until the waiter's context ends,
// however long it is: its turn comes in arrival order.
const queueWait = 5 * time.Second

// errQueueTimeout is the error of a writer whose queue did not move for
// queueWait: a transaction held the write lock that long (a caller's
// transaction left open, or one that waits for a write of its own).
var errQueueTimeout = errors.New("database is locked: one transaction has held the write lock for 5s")

// writeQueue lets the writers of one database file take turns.
type writeQueue struct {
	mu    sync.Mutex
	held  bool
	lanes [len(lanesByPriority)][]*waiter // by lane, each in arrival order
	refs  int                             // the stores and databases that use it (queues)
	moved time.Time                       // when the turn last changed hands
	// lockPath, if set, is the file whose lock the holder of a turn takes
	// too (fileLock), so that the writers of other processes take turns
	// with this one's.
	lockPath string
	// wakes are the watchers of the database's contended leases
	// (leasedriver.Waker), shared by its stores in this process.
	wakes wakehub.Hub
}

type waiter struct {
	ready   chan struct{} // closed when the turn is handed to it
	granted bool          // under writeQueue.mu
}

// acquire waits for the writer's turn: until it has it, ctx ends (its
// error) or the turn stays queueWait with one holder (errQueueTimeout).
func (q *writeQueue) acquire(ctx context.Context, l lane) error {
	q.mu.Lock()
	if !q.held && q.empty() {
		q.held, q.moved = true, time.Now()
		q.mu.Unlock()
		return nil
	}
	w := &waiter{ready: make(chan struct{})}
	q.lanes[l] = append(q.lanes[l], w)
	stuck := time.Until(q.moved.Add(queueWait))
	q.mu.Unlock()
	t := time.NewTimer(stuck)
	defer t.Stop()
	var err error
wait:
	for {
		select {
		case <-w.ready:
			return nil
		case <-ctx.Done():
			err = ctx.Err()
			break wait
		case <-t.C:
			q.mu.Lock()
			stuck = time.Until(q.moved.Add(queueWait))
			q.mu.Unlock()
			if stuck <= 0 {
				err = errQueueTimeout
				break wait
			}
			t.Reset(stuck)
		}
	}
	q.mu.Lock()
	if w.granted {
		// Handed the turn as it gave up: pass it on.
		q.mu.Unlock()
		q.release()
		return err
	}
	for i, x := range q.lanes[l] {
		if x == w {
			q.lanes[l] = append(q.lanes[l][:i:i], q.lanes[l][i+1:]...)
			break
		}
	}
	q.mu.Unlock()
	return err
}

func (q *writeQueue) empty() bool {
	for _, w := range q.lanes {
		if len(w) > 0 {
			return false
		}
	}
	return true
}

// release ends the turn, handing it to the first waiter of the first lane
// (by lanesByPriority) that has one.
func (q *writeQueue) release() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, l := range lanesByPriority {
		if len(q.lanes[l]) > 0 {
			w := q.lanes[l][0]
			q.lanes[l] = q.lanes[l][1:]
			w.granted, q.moved = true, time.Now()
			close(w.ready)
			return
		}
	}
	q.held = false
}

// queues holds the queue of each database file (by absolute path) and of
// each database given to New, for as long as a store or a database of
// Open uses it.
var queues = struct {
	sync.Mutex
	byName map[any]*writeQueue
}{byName: map[any]*writeQueue{}}

// fileKey names the database file at path for queueFor, and returns the
// path of its writers' lock file (LockFileSuffix; empty for an in-memory
// database, which no other process can open).
func fileKey(path string) (key any, lockPath string) {
	p, err := filepath.Abs(path)
	if err != nil {
		p = filepath.Clean(path)
	}
	if r, err := filepath.EvalSymlinks(p); err == nil {
		p = r
	}
	if strings.HasPrefix(path, ":memory:") {
		return "file:" + p, ""
	}
	return "file:" + p, p + LockFileSuffix
}

// LockFileSuffix names the file next to the database that [Open]'s
// writers lock, so that the writers of several processes on one database
// file take turns (on systems with flock: Linux, macOS, the BSDs): the
// holder of a process's turn locks it for the length of its write
// transaction, and a process waiting for it is woken as soon as it is
// free, where SQLite's busy handler would have it sleep up to 100 ms
// between tries and let the busiest process keep the lock. Like the -wal
// and -shm files, it belongs to the database; it holds no data.
const LockFileSuffix = "-writers"

// queueFor returns the queue of key, holding a reference until put.
// lockPath (empty: none) is the file a turn's holder locks as well.
func queueFor(key any, lockPath string) *writeQueue {
	queues.Lock()
	defer queues.Unlock()
	q := queues.byName[key]
	if q == nil {
		q = &writeQueue{lockPath: lockPath}
		queues.byName[key] = q
	}
	q.refs++
	return q
}

// putQueue drops a reference taken by queueFor.
func putQueue(key any) {
	queues.Lock()
	defer queues.Unlock()
	if q := queues.byName[key]; q != nil {
		if q.refs--; q.refs <= 0 {
			delete(queues.byName, key)
		}
	}
}

// openQueued opens the database at dsn with every write transaction
// queued on q. A statement outside a transaction (and a transaction begun
// with an explicit BEGIN statement) does not take a turn: it waits for the
// lock in SQLite's busy handler.
func openQueued(dsn string, q *writeQueue) (*sql.DB, error) {
	c, err := sqlite.NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(&queuedConnector{inner: c, q: q}), nil
}

type queuedConnector struct {
	inner driver.Connector
	q     *writeQueue
}

func (c *queuedConnector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &queuedConn{Conn: dc, q: c.q}, nil
}

func (c *queuedConnector) Driver() driver.Driver { return c.inner.Driver() }

// conn is what a modernc.org/sqlite connection offers beyond driver.Conn.
type conn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
}

// queuedConn is a connection whose write transactions take a turn of the
// file's queue first. database/sql uses a connection from one goroutine at
// a time.
type queuedConn struct {
	driver.Conn
	q      *writeQueue
	turn   bool   // a transaction of this connection holds a turn
	unlock func() // ends the turn's file lock
	stmts  map[string]*cachedStmt
}

// stmtCacheSize bounds the statements one connection keeps prepared. The
// store's statements are a fixed set, well under it.
const stmtCacheSize = 256

// cachedStmt is a statement a connection keeps prepared, so that running
// it again skips SQLite's parser and planner (a quarter of a lease call's
// CPU when every call prepared its statements).
type cachedStmt struct {
	st   driver.Stmt
	busy bool // rows of it are open: a second use prepares anew
}

// cached returns query's prepared statement on the connection, preparing
// it on first use; nil when it is in use or cannot be kept, and the caller
// runs the query unprepared (which reports any error the query has).
func (c *queuedConn) cached(ctx context.Context, fc conn, query string) *cachedStmt {
	if cs, ok := c.stmts[query]; ok {
		if cs.busy {
			return nil
		}
		return cs
	}
	if len(c.stmts) >= stmtCacheSize {
		return nil
	}
	st, err := fc.PrepareContext(ctx, query)
	if err != nil {
		return nil
	}
	if _, ok := st.(driver.StmtQueryContext); !ok {
		st.Close()
		return nil
	}
	if _, ok := st.(driver.StmtExecContext); !ok {
		st.Close()
		return nil
	}
	if c.stmts == nil {
		c.stmts = map[string]*cachedStmt{}
	}
	cs := &cachedStmt{st: st}
	c.stmts[query] = cs
	return cs
}

// stmtRows are the rows of a cached statement, which is free again once
// they are closed.
type stmtRows struct {
	driver.Rows
	cs *cachedStmt
}

func (r *stmtRows) Close() error {
	err := r.Rows.Close()
	r.cs.busy = false
	return err
}

// The column types the driver's rows give, for sql.Rows.ColumnTypes.

func (r *stmtRows) ColumnTypeDatabaseTypeName(i int) string {
	if t, ok := r.Rows.(driver.RowsColumnTypeDatabaseTypeName); ok {
		return t.ColumnTypeDatabaseTypeName(i)
	}
	return ""
}

func (r *stmtRows) ColumnTypeScanType(i int) reflect.Type {
	if t, ok := r.Rows.(driver.RowsColumnTypeScanType); ok {
		return t.ColumnTypeScanType(i)
	}
	return reflect.TypeFor[any]()
}

func (r *stmtRows) ColumnTypeNullable(i int) (nullable, ok bool) {
	if t, ok := r.Rows.(driver.RowsColumnTypeNullable); ok {
		return t.ColumnTypeNullable(i)
	}
	return false, false
}

func (r *stmtRows) ColumnTypeLength(i int) (length int64, ok bool) {
	if t, ok := r.Rows.(driver.RowsColumnTypeLength); ok {
		return t.ColumnTypeLength(i)
	}
	return 0, false
}

func (r *stmtRows) ColumnTypePrecisionScale(i int) (precision, scale int64, ok bool) {
	if t, ok := r.Rows.(driver.RowsColumnTypePrecisionScale); ok {
		return t.ColumnTypePrecisionScale(i)
	}
	return 0, 0, false
}

func (c *queuedConn) full() (conn, error) {
	fc, ok := c.Conn.(conn)
	if !ok {
		return nil, fmt.Errorf("sqlitestore: the sqlite driver's connection lacks an interface the store needs (%T)", c.Conn)
	}
	return fc, nil
}

// Begin is BeginTx without a context.
func (c *queuedConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

// BeginTx takes a turn for a write transaction (every transaction but a
// read-only one: the store's DSN begins them IMMEDIATE), then begins it.
func (c *queuedConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	fc, err := c.full()
	if err != nil {
		return nil, err
	}
	if opts.ReadOnly {
		return fc.BeginTx(ctx, opts)
	}
	if err := c.q.acquire(ctx, laneOf(ctx)); err != nil {
		return nil, err
	}
	unlock := func() {}
	if c.q.lockPath != "" {
		u, err := fileLock(ctx, c.q.lockPath)
		if err != nil {
			c.q.release()
			return nil, err
		}
		unlock = u
	}
	tx, err := fc.BeginTx(ctx, opts)
	if err != nil {
		unlock()
		c.q.release()
		return nil, err
	}
	c.turn, c.unlock = true, unlock
	return &queuedTx{Tx: tx, c: c}, nil
}

// end ends the turn of the connection's transaction, once.
func (c *queuedConn) end() {
	if c.turn {
		c.turn = false
		c.unlock()
		c.q.release()
	}
}

func (c *queuedConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	fc, err := c.full()
	if err != nil {
		return nil, err
	}
	return fc.PrepareContext(ctx, query)
}

func (c *queuedConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	fc, err := c.full()
	if err != nil {
		return nil, err
	}
	if cs := c.cached(ctx, fc, query); cs != nil {
		return cs.st.(driver.StmtExecContext).ExecContext(ctx, args)
	}
	return fc.ExecContext(ctx, query, args)
}

func (c *queuedConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	fc, err := c.full()
	if err != nil {
		return nil, err
	}
	if cs := c.cached(ctx, fc, query); cs != nil {
		rows, err := cs.st.(driver.StmtQueryContext).QueryContext(ctx, args)
		if err != nil {
			return nil, err
		}
		cs.busy = true
		return &stmtRows{Rows: rows, cs: cs}, nil
	}
	return fc.QueryContext(ctx, query, args)
}

func (c *queuedConn) Ping(ctx context.Context) error {
	fc, err := c.full()
	if err != nil {
		return err
	}
	return fc.Ping(ctx)
}

func (c *queuedConn) ResetSession(ctx context.Context) error {
	fc, err := c.full()
	if err != nil {
		return err
	}
	return fc.ResetSession(ctx)
}

func (c *queuedConn) IsValid() bool {
	fc, err := c.full()
	return err == nil && fc.IsValid()
}

// Close closes the connection, ending a turn its transaction still held.
func (c *queuedConn) Close() error {
	c.end()
	for q, cs := range c.stmts {
		cs.st.Close()
		delete(c.stmts, q)
	}
	return c.Conn.Close()
}

type queuedTx struct {
	driver.Tx
	c *queuedConn
}

func (t *queuedTx) Commit() error {
	defer t.c.end()
	return t.Tx.Commit()
}

func (t *queuedTx) Rollback() error {
	defer t.c.end()
	return t.Tx.Rollback()
}
