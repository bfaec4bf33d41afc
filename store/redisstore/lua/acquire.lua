#!lua
-- Acquire a lease.
-- KEYS[1] lock key (value: the holder's token, PX ttl)
-- KEYS[2] fence key (the last fence granted, kept ttl + retention)
-- KEYS[3] holder key ('<fence> <description>', PX ttl; it describes the
--         lock only while its fence is the fence key's)
-- KEYS[4] queue key (zset: the waiters' tokens by arrival, server µs)
-- KEYS[5] stays key (zset: the waiters' tokens by the end of their stay)
-- KEYS[6] fence floor of the hash slot (no expiry): every grant in the
--         slot raises it to its fence, and every new fence is above it,
--         so fences stay above those of keys whose records expired
-- KEYS[7] hand-over key (hash: a queued waiter's token -> '<attempt>
--         <grant end, server µs> <its process's grant channel>
--         <holder description>', for the release that hands it the key;
--         see release.lua)
-- ARGV[1] token, ARGV[2] ttl in ms, ARGV[3] fence retention in ms,
-- ARGV[4] holder description ('' for none), ARGV[5] the caller's stay in
-- the queue in ms when it is refused (0: a plain acquire, which does not
-- queue), ARGV[6] the caller's attempt number for a hand-over (0: none),
-- ARGV[7] the channel its process receives a hand-over on ('' for none)
-- Returns {1, fence, ttl} when granted (or renewed for the holding token),
-- {0, pttl, holder description or '', waiters ahead} when another token
-- holds the lock, or {0, 0, '', waiters ahead} when the lock is free but
-- live waiters came first: a free lock goes to the first live waiter.
-- The arguments are checked before the first write: a script error does not
-- roll back what was already written. (On a full server the script is
-- refused before it starts: it declares no allow-oom.)
local token, ttl, keep, holder, stay = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
local attempt, grantch = ARGV[6], ARGV[7]
if #KEYS ~= 7 or #ARGV ~= 7 or #token < 1 or #token > 128
  or not ttl or ttl < 1 or ttl > 86400000 or ttl % 1 ~= 0
  or not keep or keep < 0 or keep > 315360000000 or keep % 1 ~= 0
  or not stay or stay < 0 or stay > 86400000 or stay % 1 ~= 0
  or not attempt:find('^%d+$') or #attempt > 20 or #grantch > 512 or grantch:find('[%s%z]')
  or #holder > 128 or holder:find('[%z\n\r]') then
  return redis.error_reply('ERR redisstore: invalid acquire arguments')
end
local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
-- The waiters: drop those whose stay ended, and count those ahead.
local ahead, rank = 0, nil
if redis.call('EXISTS', KEYS[4]) == 1 then
  local gone = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', clock())
  if #gone > 0 then
    redis.call('ZREM', KEYS[4], unpack(gone))
    redis.call('ZREM', KEYS[5], unpack(gone))
    redis.call('HDEL', KEYS[7], unpack(gone))
  end
  rank = redis.call('ZRANK', KEYS[4], token)
  ahead = rank or redis.call('ZCARD', KEYS[4])
end
-- A refused caller with a stay keeps (or takes) its place.
local function wait()
  if stay > 0 then
    local now = clock()
    if not rank then
      redis.call('ZADD', KEYS[4], now, token)
    end
    redis.call('ZADD', KEYS[5], now + stay * 1000, token)
    -- A waiter that takes a hand-over: the grant a release may give it
    -- runs for ttl from now, the time of this attempt.
    if attempt ~= '0' and grantch ~= '' then
      redis.call('HSET', KEYS[7], token, attempt .. ' ' .. string.format('%d', now + ttl * 1000) .. ' ' .. grantch .. ' ' .. holder)
    else
      redis.call('HDEL', KEYS[7], token)
    end
    for _, i in ipairs({4, 5, 7}) do
      if redis.call('PTTL', KEYS[i]) < stay then
        redis.call('PEXPIRE', KEYS[i], stay)
      end
    end
  end
end
local function leave()
  if rank then
    redis.call('ZREM', KEYS[4], token)
    redis.call('ZREM', KEYS[5], token)
    redis.call('HDEL', KEYS[7], token)
  end
end
-- The refusal: the holder's remaining time and description, or 0 and ''
-- for a free lock promised to a waiter ahead.
local function refuse()
  wait()
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl == -2 then
    return {0, 0, '', ahead}
  end
  local h, fs = redis.call('GET', KEYS[3]), redis.call('GET', KEYS[2])
  if h and fs and h:sub(1, #fs + 1) == fs .. ' ' then
    return {0, pttl, h:sub(#fs + 2), ahead}
  end
  return {0, pttl, '', ahead}
end
if ahead > 0 and redis.call('GET', KEYS[1]) ~= token then
  return refuse()
end
if redis.call('SET', KEYS[1], token, 'NX', 'PX', ttl) then
  leave()
  -- A new grant: fence = max(last + 1, floor + 1, server clock in
  -- microseconds), where last is the key's fence key (while it lasts) and
  -- floor the slot's fence floor, which is then raised to the new fence.
  -- The common case (the clock is ahead of both) writes the clock to both
  -- and reads the old values in the same commands.
  local f = clock()
  local fs = string.format('%d', f)
  local last = tonumber(redis.call('SET', KEYS[2], fs, 'PX', ttl + keep, 'GET')) or 0
  local floor = tonumber(redis.call('SET', KEYS[6], fs, 'GET')) or 0
  if floor > last then
    last = floor
  end
  if last >= f then
    f = last + 1
    fs = string.format('%d', f)
    redis.call('SET', KEYS[2], fs, 'PX', ttl + keep)
    redis.call('SET', KEYS[6], fs)
  end
  -- Without a description nothing is written: a holder key left by an
  -- earlier grant names an older fence and no longer counts.
  if holder ~= '' then
    redis.call('SET', KEYS[3], fs .. ' ' .. holder, 'PX', ttl)
  end
  return {1, f, ttl}
end
if redis.call('GET', KEYS[1]) ~= token then
  return refuse()
end
leave()
-- The same token holds the lock: renew it to ttl, same fence, and replace
-- the description.
redis.call('PEXPIRE', KEYS[1], ttl)
local last = redis.call('GET', KEYS[2])
local f = tonumber(last)
if f then
  redis.call('PEXPIRE', KEYS[2], ttl + keep)
else
  -- Its fence key is gone (deleted by hand): grant a new fence, which the
  -- slot's fence floor keeps above the lost one.
  f = math.max(clock(), (tonumber(redis.call('GET', KEYS[6])) or 0) + 1)
  last = string.format('%d', f)
  redis.call('SET', KEYS[2], last, 'PX', ttl + keep)
  redis.call('SET', KEYS[6], last)
end
if holder ~= '' then
  redis.call('SET', KEYS[3], last .. ' ' .. holder, 'PX', ttl)
else
  redis.call('DEL', KEYS[3])
end
return {1, f, ttl}
