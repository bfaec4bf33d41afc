#!lua flags=allow-oom
-- Release a lease: compare the token and delete the lock in one step (the
-- fallback for servers without DELEX ... IFEQ), with the holder key (a
-- description counts only while the lock is held). The fence key stays
-- until its own expiry (the lock's TTL plus the retention), so Inspect
-- reports the last fence meanwhile; once it is gone, the slot's fence
-- floor keeps later fences above it.
-- KEYS[1] lock key, KEYS[2] queue key, KEYS[3] stays key (the key's
-- waiters, see acquire.lua), KEYS[4] holder key, KEYS[5] fence key,
-- KEYS[6] the slot's fence floor, KEYS[7] hand-over key (see
-- acquire.lua); ARGV[1] token; ARGV[2] the channel that wakes the key's
-- waiters ('' for none), ARGV[3] '1' to publish it sharded (SPUBLISH,
-- Redis Cluster), ARGV[4] '1' to hand the key over, ARGV[5] the fence
-- retention in ms.
-- The wake-up names the first live waiter (the first 16 hex digits of its
-- token's SHA-1), '' when none waits. When that waiter took a hand-over
-- (its entry in KEYS[7]), its grant has time left and its process is
-- subscribed to the channel its entry names, the key is its own at once:
-- a new grant (a fence above the last, as acquire.lua grants it), until
-- the end its attempt asked for, with its holder description; it leaves
-- the queue, and the wake-up on its process's channel carries the grant
-- ('<waiter>/<fence>/<attempt>'). A waiter whose process ended is never
-- handed the key: its subscription is gone.
-- Returns 1 if deleted (or handed over), 0 otherwise. Every argument is
-- checked, and everything a hand-over needs read, before the first write:
-- a script error does not roll back what was already written.
-- allow-oom: deleting frees memory, so a holder can release on a full
-- server; a hand-over writes in place of what the release deletes (the
-- lock and holder keys) and replaces the fence and floor values.
local token, sharded, keep = ARGV[1], ARGV[3] == '1', tonumber(ARGV[5])
if #KEYS ~= 7 or #ARGV ~= 5 or #token < 1 or #token > 128
  or (ARGV[3] ~= '0' and ARGV[3] ~= '1') or (ARGV[4] ~= '0' and ARGV[4] ~= '1')
  or not keep or keep < 0 or keep > 315360000000 or keep % 1 ~= 0 then
  return redis.error_reply('ERR redisstore: invalid release arguments')
end
if redis.call('GET', KEYS[1]) ~= token then
  return 0
end
local channel, wake = ARGV[2], ''
local now, gone, first, grant
if channel ~= '' and redis.call('EXISTS', KEYS[2]) == 1 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
  -- The first live waiter: the first place whose stay has not ended.
  local dropped = {}
  for _, w in ipairs(gone) do
    dropped[w] = true
  end
  local ahead = redis.call('ZRANGE', KEYS[2], 0, #gone)
  for _, w in ipairs(ahead) do
    if not dropped[w] then
      first = w
      break
    end
  end
  local h = first and ARGV[4] == '1' and redis.call('HGET', KEYS[7], first)
  if h then
    local attempt, till, ch, holder = h:match('^(%d+) (%d+) (%S+) (.*)$')
    -- The grant ends where the attempt's would have, rounded up to the
    -- millisecond.
    local left = till and tonumber(till) - now
    if left and left >= 1000
      and redis.call('PUBSUB', sharded and 'SHARDNUMSUB' or 'NUMSUB', ch)[2] > 0 then
      grant = {attempt = attempt, ttl = math.ceil(left / 1000), ch = ch, holder = holder}
    end
  end
end
redis.call('DEL', KEYS[1], KEYS[4])
if channel == '' then
  return 1
end
if gone and #gone > 0 then
  redis.call('ZREM', KEYS[2], unpack(gone))
  redis.call('ZREM', KEYS[3], unpack(gone))
  redis.call('HDEL', KEYS[7], unpack(gone))
end
if first then
  wake = redis.sha1hex(first):sub(1, 16)
end
if grant then
  local ttl = grant.ttl
  redis.call('SET', KEYS[1], first, 'PX', ttl)
  -- The fence, as acquire.lua grants a new one: max(last + 1, floor + 1,
  -- server clock in microseconds).
  local f = now
  local fs = string.format('%d', f)
  local last = tonumber(redis.call('SET', KEYS[5], fs, 'PX', ttl + keep, 'GET')) or 0
  local floor = tonumber(redis.call('SET', KEYS[6], fs, 'GET')) or 0
  if floor > last then
    last = floor
  end
  if last >= f then
    f = last + 1
    fs = string.format('%d', f)
    redis.call('SET', KEYS[5], fs, 'PX', ttl + keep)
    redis.call('SET', KEYS[6], fs)
  end
  if grant.holder ~= '' then
    redis.call('SET', KEYS[4], fs .. ' ' .. grant.holder, 'PX', ttl)
  end
  redis.call('ZREM', KEYS[2], first)
  redis.call('ZREM', KEYS[3], first)
  redis.call('HDEL', KEYS[7], first)
  channel, wake = grant.ch, wake .. '/' .. fs .. '/' .. grant.attempt
end
redis.call(sharded and 'SPUBLISH' or 'PUBLISH', channel, wake)
return 1
