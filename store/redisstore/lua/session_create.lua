#!lua
-- Create a session record.
-- KEYS[1] session key (hash: u user, d data, v version, c created ms,
--         i idle deadline ms, a absolute deadline ms, e key expiry ms;
--         PEXPIREAT e)
-- KEYS[2] the user's index (zset: session ID -> absolute deadline ms)
-- ARGV[1] user, ARGV[2] data, ARGV[3] idle ms, ARGV[4] absolute ms,
-- ARGV[5] session ID
-- Returns {1, created, idle deadline, absolute deadline} or {0} when the
-- ID exists (never overwritten).
local idle, abs = tonumber(ARGV[3]), tonumber(ARGV[4])
if #KEYS ~= 2 or #ARGV ~= 5 or #ARGV[1] < 1 or #ARGV[5] ~= 68
  or not idle or idle < 1 or idle % 1 ~= 0 or idle > 31622400000
  or not abs or abs < 1 or abs % 1 ~= 0 or abs > 31622400000 then
  return redis.error_reply('ERR redisstore: invalid session create arguments')
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local a = now + abs
local i = math.min(now + idle, a)
local e = math.min(i + idle, a) -- the key's expiry (see session_load.lua)
local fmt = '%d'
redis.call('HSET', KEYS[1], 'u', ARGV[1], 'd', ARGV[2], 'v', '1',
  'c', string.format(fmt, now), 'i', string.format(fmt, i), 'a', string.format(fmt, a),
  'e', string.format(fmt, e))
redis.call('PEXPIREAT', KEYS[1], string.format(fmt, e))
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', string.format(fmt, now))
redis.call('ZADD', KEYS[2], string.format(fmt, a), ARGV[5])
if redis.call('PEXPIRETIME', KEYS[2]) < a then
  redis.call('PEXPIREAT', KEYS[2], string.format(fmt, a))
end
return {1, now, i, a}
