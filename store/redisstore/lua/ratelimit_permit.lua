#!lua
-- Concurrency permits: acquire, renew or release one permit, on the
-- server's clock (TIME, microseconds). The same rules as
-- ratelimit.EvaluateAcquire/Renew/Release.
--
-- KEYS[1]  zset: permit id -> expiry (µs)
-- KEYS[2]  hash: permit id -> fence, and "" -> the last fence granted
-- ARGV[1]  "a" acquire, "r" renew, "x" release
-- ARGV[2]  permit id
-- ARGV[3]  permits (acquire), ARGV[4] ttl in µs (acquire, renew)
-- Returns {held (1/0), fence, in use, retry after (µs), now}.
-- Both keys expire (PXAT) once the last permit expired and the clock passed
-- the last fence, so that a fence taken from the clock afterwards is above
-- every earlier one.
local op, id = ARGV[1], ARGV[2]
local function bad(what)
  return redis.error_reply('ERR redisstore: invalid ratelimit permit arguments (' .. what .. ')')
end
if #KEYS ~= 2 or #ARGV ~= 4 or (op ~= 'a' and op ~= 'r' and op ~= 'x') or #id < 1 or #id > 64 then
  return bad('shape')
end
local permits, ttl = tonumber(ARGV[3]), tonumber(ARGV[4])
if op == 'a' and (not permits or permits < 1 or permits > 10000 or permits % 1 ~= 0) then return bad('permits') end
if op ~= 'x' and (not ttl or ttl < 1000 or ttl > 86400000000 or ttl % 1 ~= 0) then return bad('ttl') end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local z, h = KEYS[1], KEYS[2]
local live = string.format('(%d', now)

-- Reads first.
local inuse = redis.call('ZCOUNT', z, live, '+inf')
local score = redis.call('ZSCORE', z, id)
local held = score and tonumber(score) > now
local last = tonumber(redis.call('HGET', h, '') or '0')
if not last then
  return redis.error_reply('ERR redisstore: malformed permit state at ' .. h)
end
local fence = 0
if held then
  fence = tonumber(redis.call('HGET', h, id))
  if not fence then
    return redis.error_reply('ERR redisstore: malformed permit state at ' .. h)
  end
end

-- expire sets both keys to expire after the last permit and the last fence.
local function expire()
  local newest = redis.call('ZRANGE', z, -1, -1, 'WITHSCORES')
  local until_ = last + 1
  if newest[2] and tonumber(newest[2]) > until_ then until_ = tonumber(newest[2]) end
  local at = string.format('%d', math.ceil(until_ / 1000))
  if until_ <= now then
    redis.call('DEL', z, h)
    return
  end
  redis.call('PEXPIREAT', z, at)
  redis.call('PEXPIREAT', h, at)
end
-- prune drops expired permits and their fences.
local function prune()
  local gone = redis.call('ZRANGEBYSCORE', z, '-inf', string.format('%d', now))
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', z, '-inf', string.format('%d', now))
    for i = 1, #gone, 500 do
      redis.call('HDEL', h, unpack(gone, i, math.min(i + 499, #gone)))
    end
  end
end

if op == 'x' then
  if not held then return {0, 0, inuse, 0, now} end
  prune()
  redis.call('ZREM', z, id)
  redis.call('HDEL', h, id)
  expire()
  return {1, fence, inuse - 1, 0, now}
end
if op == 'r' then
  if not held then return {0, 0, inuse, 0, now} end
  prune()
  redis.call('ZADD', z, string.format('%d', now + ttl), id)
  expire()
  return {1, fence, inuse, 0, now}
end
-- acquire
if held then
  prune()
  redis.call('ZADD', z, string.format('%d', now + ttl), id)
  expire()
  return {1, fence, inuse, 0, now}
end
if inuse >= permits then
  local soonest = redis.call('ZRANGEBYSCORE', z, live, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  return {0, 0, inuse, tonumber(soonest[2]) - now, now}
end
fence = last + 1
if now > fence then fence = now end
prune()
redis.call('ZADD', z, string.format('%d', now + ttl), id)
redis.call('HSET', h, id, string.format('%d', fence), '', string.format('%d', fence))
last = fence
expire()
return {1, fence, inuse + 1, 0, now}
