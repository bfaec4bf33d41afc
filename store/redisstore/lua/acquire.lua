#!lua
-- Acquire a lease.
-- KEYS[1] lock key (value: the holder's token, PX ttl)
-- KEYS[2] fence key (the last fence granted, kept ttl + retention)
-- ARGV[1] token, ARGV[2] ttl in ms, ARGV[3] fence retention in ms
-- Returns {1, fence, ttl} when granted (or renewed for the holding token),
-- {0, pttl} when another token holds the lock.
-- The arguments are checked before the first write: a script error does not
-- roll back what was already written. (On a full server the script is
-- refused before it starts: it declares no allow-oom.)
local token, ttl, keep = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if #KEYS ~= 2 or #ARGV ~= 3 or #token < 1 or #token > 128
  or not ttl or ttl < 1 or ttl > 86400000 or ttl % 1 ~= 0
  or not keep or keep < 1 or keep > 315360000000 or keep % 1 ~= 0 then
  return redis.error_reply('ERR redisstore: invalid acquire arguments')
end
local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
if redis.call('SET', KEYS[1], token, 'NX', 'PX', ttl) then
  -- A new grant: fence = max(last + 1, server clock in microseconds).
  -- The common case (the clock is ahead of the last fence) writes the
  -- clock and reads the old value in one command.
  local f = clock()
  local last = tonumber(redis.call('SET', KEYS[2], string.format('%d', f), 'PX', ttl + keep, 'GET'))
  if last and last >= f then
    f = last + 1
    redis.call('SET', KEYS[2], string.format('%d', f), 'PX', ttl + keep)
  end
  return {1, f, ttl}
end
if redis.call('GET', KEYS[1]) ~= token then
  return {0, redis.call('PTTL', KEYS[1])}
end
-- The same token holds the lock: renew it to ttl, same fence.
redis.call('PEXPIRE', KEYS[1], ttl)
local last = tonumber(redis.call('GET', KEYS[2]))
if last then
  redis.call('PEXPIRE', KEYS[2], ttl + keep)
  return {1, last, ttl}
end
-- Its fence key is gone (deleted by hand): grant a new fence, which the
-- clock floor keeps above the lost one.
local f = clock()
redis.call('SET', KEYS[2], string.format('%d', f), 'PX', ttl + keep)
return {1, f, ttl}
