package lab

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/tenurekit/tenure/store/sqlitestore"
)

// ForgetEnded makes the store lose what it keeps of keys' ended leases
// (released or expired): their records, fences included, are deleted, as a
// restore from an older copy, a replica that was behind, or a Redis
// restart without persistence would lose them; on Redis the fence floors
// of their hash slots go too. Held leases are not touched, nor is a record
// whose fence is still above the store's clock in microseconds (the floor
// a new grant's fence starts from), so the rule that keeps fences
// increasing across such a loss is put to the test: a new grant's fence
// must still exceed every fence granted before. It returns how many
// leases' records it deleted.
//
// On the memory store, which belongs to the Env alone, it deletes every
// ended lease, whatever keys says, and the store's fence floor. On etcd it
// deletes nothing: a fence there is the revision of the lock key, which a
// deletion does not reset.
func (e *Env) ForgetEnded(ctx context.Context, keys []string) (int, error) {
	switch {
	case e.Mem != nil:
		return e.Mem.ForgetEnded(), nil
	case e.SQLite != nil:
		if len(keys) == 0 {
			return 0, nil
		}
		args := []any{time.Now().UnixMicro()}
		marks := make([]string, len(keys))
		for i, k := range keys {
			marks[i] = fmt.Sprintf("?%d", i+2)
			args = append(args, k)
		}
		r, err := e.SQLite.DB().ExecContext(ctx, `DELETE FROM "`+sqlitestore.DefaultTablePrefix+`leases"
			WHERE "key" IN (`+strings.Join(marks, ", ")+`) AND (token IS NULL OR expires_us <= ?1) AND fence < ?1`, args...)
		if err != nil {
			return 0, fmt.Errorf("lab: forget ended leases: %w", err)
		}
		n, err := r.RowsAffected()
		return int(n), err
	case e.PG != nil:
		t, err := e.pool.Exec(ctx, `DELETE FROM `+e.PG.Schema()+`.leases
			WHERE key = ANY($1) AND (token IS NULL OR expires_at <= clock_timestamp())
			AND fence < (extract(epoch FROM clock_timestamp()) * 1000000)::bigint`, keys)
		if err != nil {
			return 0, fmt.Errorf("lab: forget ended leases: %w", err)
		}
		return int(t.RowsAffected()), nil
	case e.Redis != nil:
		n := 0
		for _, k := range keys {
			lock, fence, holder := e.redisLeaseKeys(k)
			d, err := forgetScript.Exec(ctx, e.redis, []string{lock, fence, holder, e.Redis.FenceFloorKey(k)}, nil).AsInt64()
			if err != nil {
				return n, fmt.Errorf("lab: forget ended leases: %w", err)
			}
			n += int(d)
		}
		return n, nil
	}
	return 0, nil
}

// redisLeaseKeys are the lock, fence and holder keys of lease key, as
// redisstore names them (one hash tag, so one script may touch all three
// on Redis Cluster too).
func (e *Env) redisLeaseKeys(key string) (lock, fence, holder string) {
	esc := strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D").Replace
	base := esc("tenure:"+e.Prefix) + "{" + esc(key) + "}:"
	return base + "lock", base + "fence", base + "holder"
}

// forgetScript deletes a lease's fence and holder keys, and the fence
// floor of its hash slot (a server that lost its data lost the floors
// too), when its lock key is gone (the lease ended) and the fence is below
// the server's clock in microseconds.
var forgetScript = rueidis.NewLuaScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local f = tonumber(redis.call('GET', KEYS[2]))
if not f then return 0 end
local t = redis.call('TIME')
if f >= tonumber(t[1]) * 1000000 + tonumber(t[2]) then return 0 end
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
return 1
`)
