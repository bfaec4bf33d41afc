package lab

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tenurekit/tenure/retention"
	"github.com/tenurekit/tenure/store/sqlitestore"
)

// ErrNoFloor reports a store whose fences need no fence floor (etcd: a
// fence is a revision, which never goes back), so RaiseFence, Reclaim and
// DropLease do not apply.
var ErrNoFloor = errors.New("lab: the store's fences need no fence floor")

// RaiseFence sets the fence the store keeps for key's lease held by token
// to f, as
// a grant made while the store's clock ran far ahead would have left it
// (a clock that stepped back since, or a server with a slower clock that
// took over). On Redis, where grants raise the fence floor of the key's
// hash slot, the floor is raised too unless noFloor is set (a store that
// kept no floor). It reports whether token still held key (false: it
// changed nothing).
func (e *Env) RaiseFence(ctx context.Context, key, token string, f uint64, noFloor bool) (bool, error) {
	switch {
	case e.Mem != nil:
		return e.Mem.RaiseFence(key, token, f), nil
	case e.SQLite != nil:
		r, err := e.SQLite.DB().ExecContext(ctx, `UPDATE "`+sqlitestore.DefaultTablePrefix+`leases" SET fence = ?1
			WHERE "key" = ?2 AND token = ?3 AND fence < ?1`, int64(f), key, token)
		if err != nil {
			return false, fmt.Errorf("lab: raise a fence: %w", err)
		}
		n, err := r.RowsAffected()
		return n == 1, err
	case e.PG != nil:
		t, err := e.pool.Exec(ctx, `UPDATE `+e.PG.Schema()+`.leases SET fence = $1
			WHERE key = $2 AND token = $3 AND fence < $1`, int64(f), key, token)
		if err != nil {
			return false, fmt.Errorf("lab: raise a fence: %w", err)
		}
		return t.RowsAffected() == 1, nil
	}
	return false, ErrNoFloor
}

// Reclaim makes the store drop what it keeps of ended leases as it does
// on its own: a sweep until nothing is left (memory, SQLite, PostgreSQL;
// the whole store, not only keys), and on Redis the keys of keys' ended
// leases deleted as their expiry would delete them. The fence floor is
// kept: later fences must still be above every fence of the records
// dropped.
func (e *Env) Reclaim(ctx context.Context, keys []string) error {
	var sw retention.Sweeper
	switch {
	case e.Mem != nil:
		sw = e.Mem
	case e.SQLite != nil:
		sw = e.SQLite
	case e.PG != nil:
		sw = e.PG
	default:
		return ErrNoFloor
	}
	for range 1000 {
		r, err := sw.Sweep(ctx, retention.Options{})
		if err != nil {
			return fmt.Errorf("lab: reclaim: %w", err)
		}
		if !r.More {
			return nil
		}
	}
	return errors.New("lab: reclaim: the sweep did not come round in 1000 passes")
}

// DropLease deletes what the store keeps of keys' ended leases without
// raising any fence floor, as a store that kept no floor would, and
// returns how many leases' records it deleted (the control of the fence
// floor's experiments).
func (e *Env) DropLease(ctx context.Context, keys []string) (int, error) {
	switch {
	case e.Mem != nil:
		n := 0
		for _, k := range keys {
			if e.Mem.DropLease(k) {
				n++
			}
		}
		return n, nil
	case e.SQLite != nil:
		n := 0
		for _, k := range keys {
			r, err := e.SQLite.DB().ExecContext(ctx, `DELETE FROM "`+sqlitestore.DefaultTablePrefix+`leases"
				WHERE "key" = ?1 AND (token IS NULL OR expires_us <= ?2)`, k, time.Now().UnixMicro())
			if err != nil {
				return n, fmt.Errorf("lab: drop a lease: %w", err)
			}
			d, _ := r.RowsAffected()
			n += int(d)
		}
		return n, nil
	case e.PG != nil:
		t, err := e.pool.Exec(ctx, `DELETE FROM `+e.PG.Schema()+`.leases
			WHERE key = ANY($1) AND (token IS NULL OR expires_at <= clock_timestamp())`, keys)
		if err != nil {
			return 0, fmt.Errorf("lab: drop a lease: %w", err)
		}
		return int(t.RowsAffected()), nil
	}
	return 0, ErrNoFloor
}
