#!lua
-- Record the result of the claim held by a token with a fence. Accepted
-- while nobody took the claim over, also after it expired; a repeat by
-- the same claim succeeds and changes nothing.
-- KEYS[1] record key; ARGV[1] token, ARGV[2] fence (decimal),
-- ARGV[3] retention (ms), ARGV[4] failed ('1' or '0'), ARGV[5] message,
-- ARGV[6] value. Returns 1, or 0 when the claim was lost.
local tok, f, ret, fl = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
if #KEYS ~= 1 or #ARGV ~= 6 or #tok < 1 or #tok > 128 or not f:match('^%d+$')
  or not ret or ret < 1 or ret > 31622400000 or ret % 1 ~= 0
  or (fl ~= '1' and fl ~= '0') then
  return redis.error_reply('ERR redisstore: invalid idempotency complete arguments')
end
local r = redis.call('HMGET', KEYS[1], 'tok', 'f', 'st')
if r[1] ~= tok or r[2] ~= f then
  return 0
end
if r[3] == '2' then
  return 1
end
if r[3] ~= '1' then
  return 0
end
local t = redis.call('TIME')
local ex = tonumber(t[1]) * 1000000 + tonumber(t[2]) + ret * 1000
-- cu stays: it counts only while st is 1.
redis.call('HSET', KEYS[1], 'st', '2', 'ex', string.format('%d', ex), 'fl', fl, 'msg', ARGV[5], 'v', ARGV[6])
redis.call('PEXPIREAT', KEYS[1], math.ceil(ex / 1000))
return 1
