package idempotency

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"slices"
)

type txKey struct{}

// TxFromContext returns the transaction of the request that
// [Keeper.TxMiddleware] is handling. The handler writes its business rows
// in it and never commits or rolls it back: the middleware does, after
// recording the response in the same transaction.
func TxFromContext(ctx context.Context) (*sql.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(*sql.Tx)
	return tx, ok && tx != nil
}

// TxMiddleware is [Keeper.Middleware] whose record commits in one database
// transaction with what the handler writes, on a SQL store whose tables
// are in db (bind: txn.Idempotency(store) for a sqlitestore or pgstore
// Store). For each request
// with an Idempotency-Key it
//
//  1. begins a transaction on db and claims the record in it (see
//     [Keeper.DoTx]: a concurrent duplicate waits for this transaction,
//     then replays its response);
//  2. runs the handler with the transaction in its request context
//     ([TxFromContext]) and the response held back, not sent;
//  3. if the response is one the middleware records (HTTPOptions.Record,
//     by default every status below 500 except 408, 409, 425 and 429),
//     records it in the transaction, commits, and only then sends it: the
//     business rows and the record land together, or, if the commit
//     fails, neither does and the client gets 503;
//  4. otherwise (a 5xx, a status Record refuses, or a panic) rolls the
//     whole transaction back and sends the handler's response: neither
//     the rows nor a record land, and a retry runs the handler again.
//
// Replays, 400, 409 (in progress, or an outcome that is unknown), 413, 422
// and 503 are those of Keeper.Middleware; a replay or a refusal rolls the
// transaction back without running the handler. Because nothing is sent
// before the commit, the whole response is held in memory (a body over
// HTTPOptions.MaxRecordBytes still goes out in full after the commit, and
// only its status is recorded), and the handler cannot flush early.
//
// A request without a key that HTTPOptions.Optional lets through runs in a
// transaction too, committed by the same rule, without a record. Methods
// outside HTTPOptions.Methods pass through untouched, with no
// transaction.
//
// The handler must not commit or roll back the transaction: the response
// could then not be recorded with its rows, and the client gets 500. Use
// READ COMMITTED on PostgreSQL (the default); open SQLite with
// sqlitestore.DSN, whose transactions take the write lock at BEGIN.
//
// A nil Keeper, db or bind, or options out of range (as for Middleware),
// give an error wrapping ErrInvalid.
func (k *Keeper) TxMiddleware(db *sql.DB, bind TxBinder, o *HTTPOptions) (*Middleware, error) {
	if k == nil || k.s == nil {
		return nil, fmt.Errorf("%w: idempotency: nil Keeper (use New)", ErrInvalid)
	}
	if db == nil {
		return nil, fmt.Errorf("%w: idempotency: nil *sql.DB", ErrInvalid)
	}
	if bind == nil {
		return nil, fmt.Errorf("%w: idempotency: nil TxBinder", ErrInvalid)
	}
	m, err := newMiddleware(k, o)
	if err != nil {
		return nil, err
	}
	return &Middleware{m: m, db: db, bind: bind}, nil
}

func (m *middleware) serveTx(w http.ResponseWriter, r *http.Request, next http.Handler, db *sql.DB, bind TxBinder) {
	req, adm := m.prepare(w, r)
	switch adm {
	case admitRefused:
		return
	case admitPass:
		next.ServeHTTP(w, r)
		return
	}
	tx, err := db.BeginTx(r.Context(), nil)
	if err != nil {
		m.o.Error(w, r, http.StatusServiceUnavailable, fmt.Errorf("%w: begin a transaction: %w", ErrUnavailable, err))
		return
	}
	defer tx.Rollback() // after a commit, a no-op; after a panic, the rollback
	buf := &heldResponse{header: http.Header{}, replay: m.replay, limit: m.o.MaxRecordBytes}
	if adm == admitUnprotected {
		next.ServeHTTP(buf, r.WithContext(context.WithValue(r.Context(), txKey{}, tx)))
		buf.finish()
		if m.recorded(buf.status) {
			if err := tx.Commit(); err != nil {
				m.commitFailed(w, r, Request{}, err)
				return
			}
		} else {
			_ = tx.Rollback()
		}
		buf.send(w)
		return
	}
	ran := false
	res, err := m.k.DoTx(r.Context(), bind(tx), req, func(ctx context.Context, c *Claim) ([]byte, error) {
		ran = true
		ctx = context.WithValue(context.WithValue(ctx, claimKey{}, c), txKey{}, tx)
		next.ServeHTTP(buf, r.WithContext(ctx))
		buf.finish()
		if !m.recorded(buf.status) {
			return nil, errNotRecorded
		}
		if buf.overflow {
			m.log.WarnContext(r.Context(), "idempotency: the response exceeds MaxRecordBytes; only its status is recorded",
				"key", req.Key, "status", buf.status)
			return encodeNotRecorded(buf.status), nil
		}
		return encodeResponse(buf.status, buf.headers, buf.body.Bytes()), nil
	})
	switch {
	case err == nil && res.Replayed:
		_ = tx.Rollback()
		m.writeReplay(w, r, req, res.Value)
	case err == nil:
		if err := tx.Commit(); err != nil {
			m.commitFailed(w, r, req, err)
			return
		}
		buf.send(w)
	case errors.Is(err, errNotRecorded):
		_ = tx.Rollback()
		buf.send(w)
	case ran:
		// The handler ran, but its response could not be recorded in the
		// transaction: nothing lands, and the client is told to retry.
		_ = tx.Rollback()
		status := http.StatusInternalServerError
		if errors.Is(err, sql.ErrTxDone) {
			m.log.ErrorContext(r.Context(), "idempotency: the handler ended the middleware's transaction; its response is not recorded",
				"key", req.Key, "err", err)
		} else {
			m.log.WarnContext(r.Context(), "idempotency: the response could not be recorded; the transaction is rolled back",
				"scope", req.Scope, "key", req.Key, "err", err)
			if errors.Is(err, ErrUnavailable) {
				status = http.StatusServiceUnavailable
			}
		}
		m.o.Error(w, r, status, err)
	default:
		_ = tx.Rollback()
		m.refuse(w, r, err)
	}
}

// commitFailed answers a request whose transaction did not commit: 503,
// so that the client retries (a commit that did land despite the error is
// replayed then).
func (m *middleware) commitFailed(w http.ResponseWriter, r *http.Request, req Request, err error) {
	m.log.WarnContext(r.Context(), "idempotency: the transaction did not commit; the handler's response is not sent",
		"key", req.Key, "err", err)
	m.o.Error(w, r, http.StatusServiceUnavailable, fmt.Errorf("%w: commit: %w", ErrUnavailable, err))
}

// heldResponse holds the handler's whole response until the transaction
// ended, recording the replayed headers at WriteHeader and at most limit
// bytes of the body for the record.
type heldResponse struct {
	header   http.Header
	replay   map[string]bool
	limit    int64
	status   int
	headers  [][2]string // the replayed headers, as at WriteHeader
	sent     http.Header // every header, as at WriteHeader
	body     bytes.Buffer
	overflow bool
}

func (h *heldResponse) Header() http.Header { return h.header }

func (h *heldResponse) WriteHeader(code int) {
	if h.status != 0 || (code >= 100 && code < 200) {
		return // superfluous, or informational (nothing goes out early)
	}
	h.status = code
	h.sent = h.header.Clone()
	names := make([]string, 0, len(h.header))
	for name := range h.header {
		if h.replay[name] {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		for _, v := range h.header[name] {
			h.headers = append(h.headers, [2]string{name, v})
		}
	}
}

func (h *heldResponse) Write(b []byte) (int, error) {
	if h.status == 0 {
		h.WriteHeader(http.StatusOK)
	}
	if int64(h.body.Len())+int64(len(b)) > h.limit {
		h.overflow = true
	}
	return h.body.Write(b)
}

func (h *heldResponse) finish() {
	if h.status == 0 {
		h.WriteHeader(http.StatusOK)
	}
}

// send writes the held response to w.
func (h *heldResponse) send(w http.ResponseWriter) {
	dst := w.Header()
	for name, vs := range h.sent {
		dst[name] = vs
	}
	w.WriteHeader(h.status)
	_, _ = w.Write(h.body.Bytes())
}
