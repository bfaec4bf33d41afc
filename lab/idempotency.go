package lab

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/tenurekit/tenure/idempotency"
)

func init() {
	register(Experiment{
		Name:  "idempotent-receipt",
		Shows: "A retried request with the same key replays the first answer, other input with the key is refused, the business change happens once, and a failed attempt leaves no record.",
		Want:  "sameInputReplays=true changedInputRejected=true businessApplied=1 failedReceiptRolledBack=true",
		Supports: func(env *Env) bool {
			return env.Mem != nil || env.SQLite != nil || env.PG != nil || env.Redis != nil
		},
		Run: idempotentReceipt,
	})
}

// receiptBook is where the business change lands: a product whose
// revision each applied receipt increments, in a SQL database. run applies
// one receipt (fn's work) with the idempotency record: in the same
// transaction where the store is that database, under a fenced claim
// otherwise.
type receiptBook struct {
	path     string // "tx" or "claim"
	close    func() error
	revision func(ctx context.Context, product string) (int, error)
	run      func(ctx context.Context, req idempotency.Request, product string, fail bool) (idempotency.Result, error)
}

var errReceiptFailed = errors.New("lab: the receipt failed before commit")

// sqlReceipts increments the product's revision in tx: "UPDATE products
// SET revision = revision + 1", the business change.
const (
	receiptTable  = "tenure_lab_products"
	receiptCreate = `CREATE TABLE IF NOT EXISTS ` + receiptTable + ` (product TEXT PRIMARY KEY, revision INTEGER NOT NULL)`
)

func sqliteRevision(db *sql.DB) func(ctx context.Context, product string) (int, error) {
	return func(ctx context.Context, product string) (int, error) {
		var n int
		err := db.QueryRowContext(ctx, `SELECT revision FROM `+receiptTable+` WHERE product = ?`, product).Scan(&n)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, nil
		}
		return n, err
	}
}

func sqliteApply(ctx context.Context, tx *sql.Tx, product string) (int, error) {
	var rev int
	err := tx.QueryRowContext(ctx, `INSERT INTO `+receiptTable+` (product, revision) VALUES (?, 1)
		ON CONFLICT (product) DO UPDATE SET revision = revision + 1 RETURNING revision`, product).Scan(&rev)
	return rev, err
}

func receiptFn(apply func(ctx context.Context) (int, error), fail bool) idempotency.Func {
	return func(ctx context.Context, c *idempotency.Claim) ([]byte, error) {
		rev, err := apply(ctx)
		if err != nil {
			return nil, err
		}
		if fail {
			return nil, errReceiptFailed
		}
		return []byte("receipt:revision=" + strconv.Itoa(rev)), nil
	}
}

func newReceiptBook(ctx context.Context, env *Env, k *idempotency.Keeper) (*receiptBook, error) {
	switch {
	case env.SQLite != nil:
		db := env.SQLite.DB()
		if _, err := db.ExecContext(ctx, receiptCreate); err != nil {
			return nil, err
		}
		return &receiptBook{path: "tx", revision: sqliteRevision(db),
			run: func(ctx context.Context, req idempotency.Request, product string, fail bool) (res idempotency.Result, err error) {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					return res, err
				}
				defer tx.Rollback()
				res, err = k.DoTx(ctx, env.SQLite.Tx(tx).Idempotency(), req,
					receiptFn(func(ctx context.Context) (int, error) { return sqliteApply(ctx, tx, product) }, fail))
				if err != nil {
					return res, err
				}
				return res, tx.Commit()
			}}, nil
	case env.PG != nil:
		pr, ok := env.Resource.(*pgResource)
		if !ok {
			return nil, errors.New("lab: postgres env without its pool")
		}
		table := pgx.Identifier{env.PG.Schema(), "lab_products"}.Sanitize()
		if _, err := pr.pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (product text PRIMARY KEY, revision int NOT NULL)`); err != nil {
			return nil, err
		}
		return &receiptBook{path: "tx",
			revision: func(ctx context.Context, product string) (int, error) {
				var n int
				err := pr.pool.QueryRow(ctx, `SELECT revision FROM `+table+` WHERE product = $1`, product).Scan(&n)
				if errors.Is(err, pgx.ErrNoRows) {
					return 0, nil
				}
				return n, err
			},
			run: func(ctx context.Context, req idempotency.Request, product string, fail bool) (res idempotency.Result, err error) {
				err = pgx.BeginFunc(ctx, pr.pool, func(tx pgx.Tx) error {
					res, err = k.DoTx(ctx, env.PG.PgxTx(tx).Idempotency(), req, receiptFn(func(ctx context.Context) (int, error) {
						var rev int
						err := tx.QueryRow(ctx, `INSERT INTO `+table+` (product, revision) VALUES ($1, 1)
							ON CONFLICT (product) DO UPDATE SET revision = `+table+`.revision + 1 RETURNING revision`, product).Scan(&rev)
						return rev, err
					}, fail))
					return err
				})
				return res, err
			}}, nil
	}
	// Memory and Redis are not the business database: the receipt lands in
	// an embedded SQLite file, in its own transaction, under the claim.
	ledger, err := tempLedger(ctx)
	if err != nil {
		return nil, err
	}
	db := ledger.SQLite.DB()
	if _, err := db.ExecContext(ctx, receiptCreate); err != nil {
		ledger.Close()
		return nil, err
	}
	return &receiptBook{path: "claim", revision: sqliteRevision(db), close: ledger.Close,
		run: func(ctx context.Context, req idempotency.Request, product string, fail bool) (idempotency.Result, error) {
			return k.Do(ctx, req, func(ctx context.Context, c *idempotency.Claim) ([]byte, error) {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					return nil, err
				}
				defer tx.Rollback()
				// The claim's fence guards the product row: a stalled
				// earlier claim's late write is refused.
				if err := ledger.SQLite.Tx(tx).Admit(ctx, "lab-product/"+product, c.Fence()); err != nil {
					return nil, err
				}
				v, err := receiptFn(func(ctx context.Context) (int, error) { return sqliteApply(ctx, tx, product) }, fail)(ctx, c)
				if err != nil {
					return nil, err
				}
				return v, tx.Commit()
			})
		}}, nil
}

func (env *Env) idempotencyStore() idempotency.Store {
	switch {
	case env.Mem != nil:
		return env.Mem.Idempotency()
	case env.SQLite != nil:
		return env.SQLite.Idempotency()
	case env.PG != nil:
		return env.PG.Idempotency()
	case env.Redis != nil:
		return env.Redis.Idempotency()
	}
	return nil
}

// idempotentReceipt is the receipt case: the first
// receipt inserts its request record and increments the product's
// revision together; the same input again replays the same receipt and
// applies nothing; the same key with changed input is refused; a receipt
// that fails before commit leaves neither its record nor a revision.
func idempotentReceipt(ctx context.Context, env *Env) (values, notes []KV, err error) {
	store := env.idempotencyStore()
	k, err := idempotency.New(store, nil)
	if err != nil {
		return nil, nil, err
	}
	book, err := newReceiptBook(ctx, env, k)
	if err != nil {
		return nil, nil, fmt.Errorf("lab: business table: %w", err)
	}
	if book.close != nil {
		defer book.close()
	}
	product := env.Key("product-42")
	scope := "lab receipt " + env.Prefix
	req := func(key, input string) idempotency.Request {
		return idempotency.Request{Scope: scope, Key: key, Fingerprint: idempotency.Fingerprint([]byte(input))}
	}

	first, err := book.run(ctx, req("receipt-1", "price=10"), product, false)
	if err != nil {
		return nil, nil, fmt.Errorf("first receipt: %w", err)
	}
	again, err := book.run(ctx, req("receipt-1", "price=10"), product, false)
	if err != nil {
		return nil, nil, fmt.Errorf("same input again: %w", err)
	}
	sameInputReplays := !first.Replayed && again.Replayed && string(again.Value) == string(first.Value)

	_, err = book.run(ctx, req("receipt-1", "price=99"), product, false)
	changedInputRejected := errors.Is(err, idempotency.ErrMismatch)
	if err != nil && !changedInputRejected {
		return nil, nil, fmt.Errorf("changed input: %w", err)
	}
	applied, err := book.revision(ctx, product)
	if err != nil {
		return nil, nil, err
	}

	_, err = book.run(ctx, req("receipt-2", "price=20"), product, true)
	if !errors.Is(err, errReceiptFailed) {
		return nil, nil, fmt.Errorf("failing receipt: %v, want its failure", err)
	}
	rec, err := store.Inspect(ctx, req("receipt-2", "price=20").ID())
	if err != nil {
		return nil, nil, err
	}
	after, err := book.revision(ctx, product)
	if err != nil {
		return nil, nil, err
	}
	rolledBack := !rec.Exists && after == applied

	return []KV{
			{"sameInputReplays", strconv.FormatBool(sameInputReplays)},
			{"changedInputRejected", strconv.FormatBool(changedInputRejected)},
			{"businessApplied", strconv.Itoa(applied)},
			{"failedReceiptRolledBack", strconv.FormatBool(rolledBack)},
		}, []KV{
			{"path", book.path},
			{"receipt", string(first.Value)},
		}, nil
}
