#!lua flags=allow-oom
-- Release a lease: compare the token and delete the lock in one step (the
-- fallback for servers without DELEX ... IFEQ), with the holder key (a
-- description counts only while the lock is held). The fence key stays
-- until its own expiry (the lock's TTL plus the retention), so Inspect
-- reports the last fence meanwhile; once it is gone, the slot's fence
-- floor keeps later fences above it.
-- KEYS[1] lock key, KEYS[2] queue key, KEYS[3] stays key (the key's
-- waiters, see acquire.lua), KEYS[4] holder key; ARGV[1] token; ARGV[2]
-- the channel that wakes the key's waiters ('' for none), ARGV[3] '1' to
-- publish it sharded (SPUBLISH, Redis Cluster). The wake-up names the
-- first live waiter (the first 16 hex digits of its token's SHA-1), ''
-- when none waits.
-- Returns 1 if deleted, 0 otherwise.
-- allow-oom: deleting frees memory, so a holder can release on a full server.
if #KEYS ~= 4 or #ARGV ~= 3 or #ARGV[1] < 1 or #ARGV[1] > 128 then
  return redis.error_reply('ERR redisstore: invalid release arguments')
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[4])
  if ARGV[2] ~= '' then
    local who = ''
    if redis.call('EXISTS', KEYS[2]) == 1 then
      local t = redis.call('TIME')
      local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
      local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
      if #gone > 0 then
        redis.call('ZREM', KEYS[2], unpack(gone))
        redis.call('ZREM', KEYS[3], unpack(gone))
      end
      local first = redis.call('ZRANGE', KEYS[2], 0, 0)
      if first[1] then
        who = redis.sha1hex(first[1]):sub(1, 16)
      end
    end
    redis.call(ARGV[3] == '1' and 'SPUBLISH' or 'PUBLISH', ARGV[2], who)
  end
  return 1
end
return 0
