package lab

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

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
	case e.Redis != nil:
		lock, fence, _ := e.redisLeaseKeys(key)
		floor := e.Redis.FenceFloorKey(key)
		keep := "0"
		if noFloor {
			keep = "1"
		}
		n, err := raiseScript.Exec(ctx, e.redis, []string{lock, fence, floor}, []string{token, strconv.FormatUint(f, 10), keep}).AsInt64()
		if err != nil {
			return false, fmt.Errorf("lab: raise a fence: %w", err)
		}
		return n == 1, nil
	}
	return false, ErrNoFloor
}

// raiseScript sets a held lease's fence key to ARGV[2] (keeping its
// expiry) if its lock still carries token ARGV[1] and its fence is below,
// and, unless ARGV[3] is '1', raises the slot's fence floor to it too, as
// the grant would have.
var raiseScript = rueidis.NewLuaScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local f, cur = tonumber(ARGV[2]), tonumber(redis.call('GET', KEYS[2]))
if not cur or cur >= f then return 0 end
redis.call('SET', KEYS[2], ARGV[2], 'KEEPTTL')
if ARGV[3] ~= '1' and (tonumber(redis.call('GET', KEYS[3])) or 0) < f then
  redis.call('SET', KEYS[3], ARGV[2])
end
return 1
`)

// expireScript deletes a lease's fence and holder keys once its lock key
// is gone (the lease ended), as their expiry would; the floor stays.
var expireScript = rueidis.NewLuaScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
return redis.call('DEL', KEYS[2], KEYS[3]) > 0 and 1 or 0
`)

// redisExpire runs expireScript on keys' leases and returns how many had
// something to delete.
func (e *Env) redisExpire(ctx context.Context, keys []string) (int, error) {
	n := 0
	for _, k := range keys {
		lock, fence, holder := e.redisLeaseKeys(k)
		d, err := expireScript.Exec(ctx, e.redis, []string{lock, fence, holder}, nil).AsInt64()
		if err != nil {
			return n, fmt.Errorf("lab: expire an ended lease's keys: %w", err)
		}
		n += int(d)
	}
	return n, nil
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
	case e.Redis != nil:
		_, err := e.redisExpire(ctx, keys)
		return err
	default:
		return ErrNoFloor
	}
	r, err := retention.SweepAll(ctx, sw, retention.Options{}, 1000)
	if err != nil {
		return fmt.Errorf("lab: reclaim: %w", err)
	}
	if r.More {
		return errors.New("lab: reclaim: the sweep did not come round in 1000 passes")
	}
	return nil
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
	case e.Redis != nil:
		// The same deletion as an expiry: what keeps the floor out of the
		// control is its raise (RaiseFence with noFloor).
		return e.redisExpire(ctx, keys)
	}
	return 0, ErrNoFloor
}
