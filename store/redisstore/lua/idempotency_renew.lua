#!lua flags=allow-oom
-- Renew the claim held by a token with a fence; never revives an expired
-- one. KEYS[1] record key; ARGV[1] token, ARGV[2] fence (decimal),
-- ARGV[3] claim TTL (ms). Returns 1, or 0 when the claim is not held.
-- allow-oom: a renewal does not grow memory.
local tok, f, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
if #KEYS ~= 1 or #ARGV ~= 3 or #tok < 1 or #tok > 128 or not f:match('^%d+$')
  or not ttl or ttl < 1 or ttl > 86400000 or ttl % 1 ~= 0 then
  return redis.error_reply('ERR redisstore: invalid idempotency renew arguments')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local r = redis.call('HMGET', KEYS[1], 'tok', 'f', 'st', 'cu', 'ex')
if r[1] ~= tok or r[2] ~= f or r[3] ~= '1' or (tonumber(r[4]) or 0) <= now then
  return 0
end
local cu = now + ttl * 1000
redis.call('HSET', KEYS[1], 'cu', string.format('%d', cu))
if cu > (tonumber(r[5]) or 0) then
  redis.call('HSET', KEYS[1], 'ex', string.format('%d', cu))
  redis.call('PEXPIREAT', KEYS[1], math.ceil(cu / 1000))
end
return 1
