package sqlitestore_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/session"
	"github.com/tenurekit/tenure/store/sqlitestore"
	"github.com/tenurekit/tenure/txn"
)

// TxMiddleware runs each request in one transaction: the handler's order
// row and the recorded response commit together, a retry replays the
// response without a second row, and a failed request leaves neither.
func Example_txMiddleware() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "tenure-example")
	defer os.RemoveAll(dir)
	store, err := sqlitestore.Open(ctx, filepath.Join(dir, "shop.db"), nil)
	if err != nil {
		panic(err)
	}
	defer store.Close()
	db := store.DB()
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL)`); err != nil {
		panic(err)
	}

	k, _ := idempotency.New(store.Idempotency(), nil)
	mw, err := k.TxMiddleware(db, txn.Idempotency(store), &idempotency.HTTPOptions{
		Principal: func(r *http.Request) string { return "alice" }, // the authenticated user
	})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, _ := idempotency.TxFromContext(r.Context()) // never commit it here
		item := r.FormValue("item")
		if item == "" {
			http.Error(w, "no item", http.StatusInternalServerError) // rolled back, not recorded
			return
		}
		res, err := tx.ExecContext(r.Context(), `INSERT INTO orders (item) VALUES (?)`, item)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		id, _ := res.LastInsertId()
		w.Header().Set("Location", fmt.Sprintf("/orders/%d", id))
		w.WriteHeader(http.StatusCreated)
	})))

	post := func(key, body string) {
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set(idempotency.HeaderKey, key)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		var rows int
		db.QueryRowContext(ctx, `SELECT count(*) FROM orders`).Scan(&rows)
		fmt.Println(w.Code, w.Header().Get("Location"), w.Header().Get(idempotency.HeaderReplayed), "rows:", rows)
	}
	post("order-1", "item=book")
	post("order-1", "item=book") // a retry: replayed, no second row
	post("order-2", "item=")     // 500: rolled back
	post("order-2", "item=pen")  // the retry runs
	// Output:
	// 201 /orders/1  rows: 1
	// 201 /orders/1 true rows: 1
	// 500   rows: 1
	// 201 /orders/2  rows: 2
}

// A transfer endpoint that checks the session where the transfer commits:
// a request whose session was valid when it arrived, but whose user logged
// out everywhere before it committed, moves no money.
func ExampleStore_Tx_checkSession() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "tenure-example")
	defer os.RemoveAll(dir)
	store, err := sqlitestore.Open(ctx, filepath.Join(dir, "bank.db"), nil)
	if err != nil {
		panic(err)
	}
	defer store.Close()
	db := store.DB()
	if _, err := db.ExecContext(ctx, `CREATE TABLE transfers (id INTEGER PRIMARY KEY, user_id TEXT, amount INTEGER)`); err != nil {
		panic(err)
	}
	m, _ := session.New(store.Sessions(), nil)

	// beforeCommit stands in for what happens between the middleware's
	// load of the session and the transaction (the second request below:
	// the user logs out everywhere).
	var beforeCommit func()
	mux := http.NewServeMux()
	mux.Handle("POST /transfers", m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := session.FromContext(r.Context())
		if s == nil {
			http.Error(w, "log in first", http.StatusUnauthorized)
			return
		}
		if beforeCommit != nil {
			beforeCommit()
		}
		tx, err := db.BeginTx(r.Context(), nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		defer tx.Rollback()
		// The check at the commit: until tx ends, no logout of this
		// session can commit; one that committed first refuses it.
		err = store.Tx(tx).CheckSession(r.Context(), s.ID(), 0)
		if errors.Is(err, session.ErrNotFound) {
			http.Error(w, "logged out", http.StatusUnauthorized)
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if _, err := tx.ExecContext(r.Context(), `INSERT INTO transfers (user_id, amount) VALUES (?, 100)`, s.UserID()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if err := tx.Commit(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})))

	tok, _, err := m.Create(ctx, "alice", nil)
	if err != nil {
		panic(err)
	}
	transfer := func() {
		r := httptest.NewRequest(http.MethodPost, "/transfers", nil)
		r.AddCookie(&http.Cookie{Name: session.DefaultCookieName, Value: tok.Reveal()})
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		var rows int
		db.QueryRowContext(ctx, `SELECT count(*) FROM transfers`).Scan(&rows)
		fmt.Println(w.Code, "transfers:", rows)
	}
	transfer()
	beforeCommit = func() { m.RevokeUser(ctx, "alice") } // "log out everywhere", mid-request
	transfer()
	// Output:
	// 201 transfers: 1
	// 401 transfers: 1
}
