#!lua
-- Move a live session to a new key (rotation) in one step.
-- KEYS[1] old session key, KEYS[2] new session key, KEYS[3] user's index,
-- KEYS[4] user's revoke marks (see session_revoke_begin.lua)
-- ARGV[1] expected version, ARGV[2] idle ms, ARGV[3] data, ARGV[4] old
-- ID, ARGV[5] new ID, ARGV[6] user
-- The new record keeps user, created and absolute deadline; its version
-- is one more. Returns {1, created, idle deadline, absolute deadline,
-- version}, {0} when the old session is not live (or not the user's),
-- {-1} on a version conflict or an existing new key.
local version, idle = tonumber(ARGV[1]), tonumber(ARGV[2])
if #KEYS ~= 4 or #ARGV ~= 6 or not version or version < 1 or version % 1 ~= 0
  or not idle or idle < 1 or idle % 1 ~= 0 or idle > 31622400000
  or #ARGV[4] ~= 68 or #ARGV[5] ~= 68 then
  return redis.error_reply('ERR redisstore: invalid session rotate arguments')
end
local r = redis.call('HMGET', KEYS[1], 'u', 'v', 'c', 'i', 'a')
local v, i, a = tonumber(r[2]), tonumber(r[4]), tonumber(r[5])
if not r[1] or r[1] ~= ARGV[6] or not v or not i or not a then
  return {0}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if i <= now or a <= now then
  return {0}
end
-- A revoke-all in progress that began after this session was created
-- has already ended it.
if redis.call('ZCOUNT', KEYS[4], r[3], '+inf') > 0 then
  return {0}
end
if v ~= version or redis.call('EXISTS', KEYS[2]) == 1 then
  return {-1}
end
v = v + 1
i = math.min(now + idle, a)
local e = math.min(i + idle, a)
redis.call('HSET', KEYS[2], 'u', r[1], 'd', ARGV[3], 'v', string.format('%d', v),
  'c', r[3], 'i', string.format('%d', i), 'a', string.format('%d', a), 'e', string.format('%d', e))
redis.call('PEXPIREAT', KEYS[2], string.format('%d', e))
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[3], ARGV[4])
redis.call('ZADD', KEYS[3], string.format('%d', a), ARGV[5])
if redis.call('PEXPIRETIME', KEYS[3]) < a then
  redis.call('PEXPIREAT', KEYS[3], string.format('%d', a))
end
return {1, tonumber(r[3]), i, a, v}
