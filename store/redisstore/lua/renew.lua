#!lua flags=allow-oom
-- Renew a lease held by a token; never brings back an expired one.
-- KEYS[1] lock key, KEYS[2] fence key, KEYS[3] holder key
-- ARGV[1] token, ARGV[2] ttl in ms, ARGV[3] fence retention in ms
-- Returns the fence, or 0 when the token does not hold the lock.
-- allow-oom: PEXPIRE does not grow memory, so a holder keeps its lease on a
-- full server.
local token, ttl, keep = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if #KEYS ~= 3 or #ARGV ~= 3 or #token < 1 or #token > 128
  or not ttl or ttl < 1 or ttl > 86400000 or ttl % 1 ~= 0
  or not keep or keep < 0 or keep > 315360000000 or keep % 1 ~= 0 then
  return redis.error_reply('ERR redisstore: invalid renew arguments')
end
if redis.call('GET', KEYS[1]) ~= token then
  return 0
end
local f = tonumber(redis.call('GET', KEYS[2]) or '')
if not f or f < 1 or f % 1 ~= 0 then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PEXPIRE', KEYS[2], ttl + keep)
-- The description (if the grant has one) lives as long as the lock.
redis.call('PEXPIRE', KEYS[3], ttl)
return f
