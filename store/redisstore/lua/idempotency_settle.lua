#!lua
-- Settle a record for an operator, guarded by its fence: record a result
-- (resolve) or drop the claim (release). Only a claimed record with the
-- given fence is settled, and a live claim only when forced; the claim's
-- token is dropped, so its holder's renewal, completion and release are
-- refused from then on.
-- KEYS[1] record key; ARGV[1] fence (decimal), ARGV[2] force ('1' or
-- '0'), ARGV[3] 'resolve' or 'release', ARGV[4] retention (ms),
-- ARGV[5] failed ('1' or '0'), ARGV[6] message, ARGV[7] value (the last
-- four count for resolve only).
-- Returns {0} settled, or {1, exists (1/0), completed (1/0), fence,
-- claim µs left} when refused, for the caller to say why.
local f, force, mode, ret, fl = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
if #KEYS ~= 1 or #ARGV ~= 7 or not f:match('^%d+$') or (force ~= '1' and force ~= '0')
  or (mode ~= 'resolve' and mode ~= 'release')
  or not ret or ret < 1 or ret > 31622400000 or ret % 1 ~= 0
  or (fl ~= '1' and fl ~= '0') then
  return redis.error_reply('ERR redisstore: invalid idempotency settle arguments')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local r = redis.call('HMGET', KEYS[1], 'f', 'st', 'cu', 'ex')
local st, ex = tonumber(r[2]), tonumber(r[4])
if not st or st == 3 or not ex or ex <= now then
  return {1, 0, 0, '0', 0}
end
local left = 0
if st == 1 then
  left = math.max((tonumber(r[3]) or 0) - now, 0)
end
if r[1] ~= f or st ~= 1 or (left > 0 and force ~= '1') then
  return {1, 1, st == 2 and 1 or 0, r[1] or '0', left}
end
if mode == 'resolve' then
  local nex = now + ret * 1000
  redis.call('HSET', KEYS[1], 'st', '2', 'ex', string.format('%d', nex), 'fl', fl, 'msg', ARGV[6], 'v', ARGV[7])
  redis.call('HDEL', KEYS[1], 'tok', 'cu')
  redis.call('PEXPIREAT', KEYS[1], math.ceil(nex / 1000))
else
  redis.call('HSET', KEYS[1], 'st', '3')
  redis.call('HDEL', KEYS[1], 'tok', 'cu', 'msg', 'v', 'fl')
end
return {0}
